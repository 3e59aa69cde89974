"""The vLLM plugin as a distribution of its own (plugins/vllm): it imports nothing of dynbranch,
its copied values stay equal to dynbranch's, it alone registers the ``dynbranch`` entry point,
and its API-server hook (``frontend``) opens the lease channel only where it should and never
stops vLLM (a fake ``AsyncLLM`` here; tests/real_engine/test_openai_server.py runs the real)."""

from __future__ import annotations

import ast
import asyncio
import importlib
import logging
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import dynbranch_vllm_plugin
import pytest
from dynbranch_vllm_plugin import frontend, values

from services.common.values import leases as dynbranch_values
from services.engine_agent.backends.remote.lease_channel import LeaseChannel
from tests.engine_agent.channel_fakes import FakeEngineCore, short_folder
from tests.engine_agent.vllm_plugin_fakes import plugin_log

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "plugins" / "vllm"


@pytest.fixture
def short_dir() -> Iterator[Path]:
    with short_folder() as path:
        yield path



def test_the_plugin_imports_nothing_of_dynbranch() -> None:
    sources = sorted((PLUGIN / "dynbranch_vllm_plugin").glob("*.py"))
    assert len(sources) >= 6
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert name.split(".")[0] not in ("services", "loadgen", "tests"), (path, name)
    assert Path(dynbranch_vllm_plugin.__file__).parent == PLUGIN / "dynbranch_vllm_plugin"


def test_the_copied_values_equal_dynbranchs() -> None:
    assert values.KAPPA_CHUNK_TOKENS == dynbranch_values.KAPPA_CHUNK_TOKENS
    for hashes in ([], [1, 2, 3], [b"\x00\x01", b"x"], ["a", 7, b"b"], [2**63 + 5]):
        assert values.prefix_digest(hashes) == dynbranch_values.prefix_digest(hashes)


def test_the_entry_point_is_the_plugins_alone() -> None:
    plugin = tomllib.loads((PLUGIN / "pyproject.toml").read_text())
    assert plugin["project"]["name"] == "dynbranch-vllm-plugin"
    assert plugin["project"]["dependencies"] == []  # never moves the container's vLLM
    assert plugin["project"]["entry-points"]["vllm.general_plugins"] == {
        "dynbranch": "dynbranch_vllm_plugin:register"}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "vllm.general_plugins" not in project["project"].get("entry-points", {})


# ---- the API-server hook -----------------------------------------------------------------------


def fake_async_llm(client_index: int = 0, dp: int = 1) -> type:
    """A class shaped like ``AsyncLLM`` as far as ``frontend`` reads it."""

    class AsyncLLM:
        def __init__(self) -> None:
            self.engine_core = FakeEngineCore()
            self.engine_core.client_index = client_index  # type: ignore[attr-defined]
            self.vllm_config = SimpleNamespace(
                parallel_config=SimpleNamespace(data_parallel_size=dp))
            self.down = False

        def shutdown(self, timeout: Any = None) -> None:
            self.down = True

    return AsyncLLM


async def test_the_channel_opens_with_asyncllm_and_closes_with_its_shutdown(
        short_dir: Path) -> None:
    endpoint = f"ipc://{short_dir}/leases.ipc"
    cls = fake_async_llm()
    frontend.wrap_async_llm(cls, endpoint)
    frontend.wrap_async_llm(cls, endpoint)  # loaded twice in a process: wrapped once
    llm = cls()
    channel = LeaseChannel(endpoint, deadline_s=2.0)
    await channel.open()
    assert (await channel.call("dynbranch_info"))["channel_protocol"] == 1
    llm.shutdown()
    assert llm.down and not (short_dir / "leases.ipc").exists()
    llm.shutdown()  # vLLM calls it again from __del__
    await channel.close()


@pytest.mark.parametrize(("client_index", "dp"), [(1, 1), (0, 2)])
async def test_no_channel_in_a_second_api_server_or_with_data_parallelism(
        short_dir: Path, client_index: int, dp: int) -> None:
    cls = fake_async_llm(client_index, dp)
    frontend.wrap_async_llm(cls, f"ipc://{short_dir}/leases.ipc")
    cls().shutdown()
    assert not (short_dir / "leases.ipc").exists()


def test_no_running_loop_or_an_unbindable_endpoint_never_stops_vllm(
        short_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    cls = fake_async_llm()
    frontend.wrap_async_llm(cls, f"ipc://{short_dir}/leases.ipc")
    with plugin_log(caplog, logging.WARNING):
        cls().shutdown()  # built outside an event loop
    assert "outside an event loop" in caplog.text

    async def unbindable() -> None:
        other = fake_async_llm()
        frontend.wrap_async_llm(other, f"ipc://{short_dir}/no/such/folder/leases.ipc")
        other().shutdown()

    with plugin_log(caplog, logging.ERROR):
        asyncio.run(unbindable())
    assert "did not open" in caplog.text


def test_install_needs_a_local_endpoint(caplog: pytest.LogCaptureFixture) -> None:
    assert frontend.install({}) is False
    assert frontend.install({frontend.ENV_CHANNEL: ""}) is False
    with plugin_log(caplog, logging.ERROR):
        assert frontend.install({frontend.ENV_CHANNEL: "tcp://0.0.0.0:1"}) is False
    assert "will not open" in caplog.text



def test_the_plugins_log_lines_go_where_vllms_go() -> None:
    # vLLM configures only its `vllm` logger: the plugin's must be under it to reach its log
    for module in ("channel", "engine_core", "frontend", "leases"):
        logger = importlib.import_module(f"dynbranch_vllm_plugin.{module}").logger
        assert logger.name == f"vllm.dynbranch_vllm_plugin.{module}"
