"""Launched engine servers (``backends.servers``), without starting one: ``dynbranch up --backend
openai`` starts each vLLM server with the dynbranch plugin's lease channel and points its agent
at it; an SGLang server has none."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from services.engine_agent.backends import servers
from services.engine_agent.backends.servers import LEASE_CHANNEL_ENV, launch_vllm_server
from services.engine_agent.config import EngineAgentSettings
from services.engine_presets import engine_setup


def test_a_launched_vllm_server_opens_a_lease_channel_its_agent_is_told_of(
        tmp_path: Path) -> None:
    server = launch_vllm_server("/models/tiny", "tiny", 16, 2048, tmp_path, 3)
    channel = f"ipc://{tmp_path}/vllm-server-3-leases.ipc"
    assert server.env[LEASE_CHANNEL_ENV] == channel
    assert server.agent_settings == (f"lease_channel={channel}",)
    assert len(channel.removeprefix("ipc://")) < 100  # a Unix socket path's limit is 107 bytes


async def test_up_points_each_openai_agent_at_its_servers_channel(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def started(self: servers.EngineServer) -> None:  # no process: the wiring only
        return None

    monkeypatch.setattr(servers.EngineServer, "start", started)
    setup = await engine_setup("openai", "tiny-cpu", 2, "m", tmp_path, model_path=str(tmp_path))
    for i, (server, sets) in enumerate(zip(setup.servers, setup.settings, strict=True)):
        channel = f"ipc://{tmp_path}/vllm-server-{i}-leases.ipc"
        assert f"lease_channel={channel}" in sets and server.env[LEASE_CHANNEL_ENV] == channel
        values = dict(s.split("=", 1) for s in sets)
        settings = EngineAgentSettings(**values)  # the agent's own settings accept them
        assert settings.lease_channel == channel and settings.engine_url == server.url
    await setup.stop()


async def test_running_servers_get_no_channel_unless_told(tmp_path: Path) -> None:
    setup = await engine_setup("openai", "tiny-cpu", 1, "m", tmp_path, ("http://127.0.0.1:1",))
    assert not any(s.startswith("lease_channel=") for s in setup.settings[0])


#: A server as uvicorn is one: bind the port (exit 3 with uvicorn's words when it is taken),
#: then answer ``/health``.
_HEALTH_SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *a):
        pass
try:
    s = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
except OSError as e:
    print(f"ERROR: [Errno {e.errno}] error while attempting to bind: address already in use")
    sys.exit(3)
s.serve_forever()
"""


async def test_a_server_whose_port_was_taken_starts_again_on_another(tmp_path: Path) -> None:
    with socket.socket() as squatter:  # took the port between choosing it and binding it
        squatter.bind(("127.0.0.1", servers.free_port()))
        taken = squatter.getsockname()[1]
        squatter.listen()
        server = servers.EngineServer("fake", lambda port: [sys.executable, "-c", _HEALTH_SERVER,
                                                            str(port)], taken,
                                      tmp_path / "fake.log", start_timeout_s=20.0)
        await server.start()
        try:
            assert server.port != taken and server.process.returncode is None
            assert servers.PORT_TAKEN in server.log_path.read_text().lower()
        finally:
            await server.stop()


async def test_a_server_that_fails_otherwise_is_not_started_again(tmp_path: Path) -> None:
    starts = []

    def command(port: int) -> list[str]:
        starts.append(port)
        return [sys.executable, "-c", "import sys; print('no model'); sys.exit(1)"]

    server = servers.EngineServer("broken", command, servers.free_port(), tmp_path / "b.log")
    with pytest.raises(servers.Unavailable, match="no model"):
        await server.start()
    assert len(starts) == 1


def test_free_ports_lie_below_the_ephemeral_range() -> None:
    low, _ = servers._ephemeral_range()
    assert all(servers._LOWEST_PORT <= servers.free_port() < low for _ in range(20))
