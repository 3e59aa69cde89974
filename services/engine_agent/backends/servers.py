"""Engine servers as child processes: a real SGLang or vLLM OpenAI server on loopback.

The remote backends (``sglang``, ``openai``) talk to a server over HTTP; this module starts one
for them where nothing else does (``dynbranch up --backend sglang``, ``bench arms --engine
sglang``, the real-engine tests) and stops it again. A server runs in its own session, so that
stopping it reaches its children too: SIGTERM to the main process (SGLang and vLLM both stop
their scheduler/engine-core children on it), then SIGKILL to whatever is left of the group.

SGLang lives in its own venv (``scripts/install_sglang.sh``; default ``.venv-sglang`` beside the
repository) and runs on this CPU machine through its plain PyTorch path with the flags of
``../shared/notes/sglang-cpu.md``. vLLM's OpenAI server runs from this process's interpreter
(the ``vllm`` extra and the dynbranch plugin, ``scripts/install_vllm.sh``), with the plugin's
lease channel open for the agent beside it. Nothing here imports an engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from services.common.values.errors import Unavailable

logger = logging.getLogger(__name__)

#: The SGLang venv ``scripts/install_sglang.sh`` creates by default.
DEFAULT_SGLANG_VENV = Path(__file__).resolve().parents[3] / ".venv-sglang"
START_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 30.0
#: The variable the dynbranch vLLM plugin opens its lease channel at (plugins/vllm, ``frontend``).
LEASE_CHANNEL_ENV = "DYNBRANCH_LEASE_CHANNEL"


#: Where ``free_port`` looks when the kernel's ephemeral range cannot be read (Linux's default).
_EPHEMERAL_DEFAULT = (32768, 60999)
#: The lowest port ``free_port`` hands out.
_LOWEST_PORT = 20000
#: Start attempts of a server whose port was taken between choosing it and binding it.
START_ATTEMPTS = 3
#: What a server's log says when its port was taken (uvicorn, under SGLang and vLLM).
PORT_TAKEN = "address already in use"


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[:2]
        return int(low), int(high)
    except (OSError, ValueError):
        return _EPHEMERAL_DEFAULT


def free_port() -> int:
    """A loopback port free at the time of asking, below the kernel's ephemeral range.

    A server child binds its port tens of seconds after it was chosen (an engine loads first);
    a port from the ephemeral range could meanwhile go to any socket that binds port 0 (gRPC
    servers, torch's TCP store), and the server would then fail to start. Ports below the range
    are only taken by those who ask for them by number."""
    low, _ = _ephemeral_range()
    if low > _LOWEST_PORT + 100:
        rng = random.Random()
        for _ in range(64):
            port = rng.randrange(_LOWEST_PORT, low)
            with socket.socket() as s, contextlib.suppress(OSError):
                s.bind(("127.0.0.1", port))
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sglang_python(venv: str | Path = "") -> Path:
    """The interpreter of the SGLang venv (``venv`` or the default one)."""
    return Path(venv or DEFAULT_SGLANG_VENV) / "bin" / "python"


def sglang_available(venv: str | Path = "") -> bool:
    """Whether the SGLang venv is there (``scripts/install_sglang.sh`` ran)."""
    python = sglang_python(venv)
    site = list(python.parent.parent.glob("lib/python3*/site-packages/sglang"))
    return python.exists() and bool(site)


@dataclass(frozen=True, slots=True)
class SglangOptions:
    """Flags of one SGLang server on the CPU (defaults: the tiny model, priorities on)."""

    model_path: str
    served_name: str = ""
    venv: str = ""
    #: Scheduler slots (``--max-running-requests``); 0 leaves SGLang's default.
    max_running: int = 16
    #: Token slots of the KV pool (``--max-total-tokens``).
    max_total_tokens: int = 32768
    context_length: int = 4096
    #: ``--enable-priority-scheduling``: a request's ``priority`` orders the waiting queue (larger
    #: values first unless ``--schedule-low-priority-values-first``).
    priority_scheduling: bool = True
    seed: int = 0
    #: Decode steps between refreshes of SGLang's load gauges (``sglang:num_running_reqs``...);
    #: its default of 40 leaves the load view a fraction of a second stale on this CPU.
    decode_log_interval: int = 10
    extra_args: tuple[str, ...] = ()


def sglang_command(options: SglangOptions, port: int) -> list[str]:
    """``python -m sglang.launch_server ...`` on the CPU's plain PyTorch path."""
    o = options
    cmd = [str(sglang_python(o.venv)), "-m", "sglang.launch_server", "--model-path",
           o.model_path, "--device", "cpu", "--host", "127.0.0.1", "--port", str(port),
           "--attention-backend", "torch_native", "--disable-cuda-graph",
           "--skip-server-warmup", "--enable-metrics", "--mem-fraction-static", "0.05",
           "--max-total-tokens", str(o.max_total_tokens), "--context-length",
           str(o.context_length), "--random-seed", str(o.seed),
           "--decode-log-interval", str(o.decode_log_interval)]
    if o.served_name:
        cmd += ["--served-model-name", o.served_name]
    if o.max_running:
        cmd += ["--max-running-requests", str(o.max_running)]
    if o.priority_scheduling:  # requests without a priority count as canonical (0)
        cmd += ["--enable-priority-scheduling", "--default-priority-value", "0"]
    return [*cmd, *o.extra_args]


def sglang_environment(root: Path) -> dict[str, str]:
    """Variables for an SGLang child: offline, caches under ``root``, no CPU-engine kernels."""
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_USE_CPU_ENGINE"}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1",
                "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor-cache"),
                "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1")})
    # The SGLang venv must not see this repository's venv on its path.
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    return env


@dataclass(slots=True)
class EngineServer:
    """One engine server process; ``start`` waits for ``/health``, ``stop`` is idempotent.

    ``command_at`` gives the command line for a port: when the port chosen was taken by the time
    the server bound it, ``start`` chooses another and starts again (``START_ATTEMPTS``)."""

    name: str
    command_at: Callable[[int], list[str]]
    port: int
    log_path: Path
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    start_timeout_s: float = START_TIMEOUT_S
    process: asyncio.subprocess.Process | None = None
    #: Engine-agent settings (``KEY=VALUE``) the agent beside this server needs, besides its URL
    #: (a vLLM server's lease channel).
    agent_settings: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        """Base URL of the server."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """PID of the main server process (None before ``start``)."""
        return self.process.pid if self.process is not None else None

    @property
    def command(self) -> list[str]:
        """The command line at the current port."""
        return self.command_at(self.port)

    async def start(self) -> None:
        """Spawn the server and wait until ``/health`` answers 200 (or it exits: Unavailable);
        a server that found its port taken starts again on another one."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, START_ATTEMPTS + 1):
            offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            with self.log_path.open("ab") as out:
                self.process = await asyncio.create_subprocess_exec(
                    *self.command, stdout=out, stderr=asyncio.subprocess.STDOUT, env=self.env,
                    start_new_session=True)
            try:
                await self._wait_healthy()
            except Unavailable:
                await self.stop()
                if attempt == START_ATTEMPTS or not self._port_was_taken(offset):
                    raise
                taken, self.port = self.port, free_port()
                logger.warning("%s: port %d was taken before the server bound it; starting "
                               "again on %d", self.name, taken, self.port)
                continue
            except BaseException:
                await self.stop()
                raise
            logger.info("%s server up at %s (pid %s)", self.name, self.url, self.pid)
            return

    def _port_was_taken(self, offset: int) -> bool:
        """Whether the attempt that logged from ``offset`` on failed to bind its port."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(offset)
                text = log.read().decode(errors="replace")
        except OSError:
            return False
        return PORT_TAKEN in text.lower()

    async def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        async with httpx.AsyncClient(timeout=2.0) as client:
            while time.monotonic() < deadline:
                assert self.process is not None
                if self.process.returncode is not None:
                    raise Unavailable(f"{self.name} server exited with {self.process.returncode}"
                                      f" during start-up; its log {self.log_path} ends:\n"
                                      f"{self.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{self.url}/health")).status_code == 200:
                        return
                await asyncio.sleep(0.5)
        raise Unavailable(f"{self.name} server not healthy after {self.start_timeout_s:.0f} s; "
                          f"its log {self.log_path} ends:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server's log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    async def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM the server, wait, then SIGKILL what is left of its process group."""
        proc = self.process
        if proc is None:
            return
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(proc.wait(), timeout_s)
        kill_group(proc.pid)
        with contextlib.suppress(asyncio.TimeoutError, ProcessLookupError):
            await asyncio.wait_for(proc.wait(), 5.0)

    def kill(self) -> None:
        """SIGKILL the main process only, as a crash would (its children are left to notice)."""
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()


def tiny_model_for_sglang(venv: str | Path = "") -> Path:
    """The tiny model folder, built by the SGLang venv's interpreter when needed (it has torch
    and transformers even where this venv has no engine extra)."""
    from services.engine_agent.backends.tiny_model import default_cache_root

    root = Path(__file__).resolve().parents[3]
    code = ("import sys; from services.engine_agent.backends.tiny_model import build_tiny_model; "
            "print(build_tiny_model(__import__('pathlib').Path(sys.argv[1])))")
    out = subprocess.run([str(sglang_python(venv)), "-c", code, str(default_cache_root())],
                         cwd=root, env={**sglang_environment(default_cache_root()),
                                        "PYTHONPATH": str(root)},
                         capture_output=True, text=True, timeout=300, check=False)
    if out.returncode != 0:
        raise Unavailable(f"building the tiny model failed: {out.stderr[-2000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def kill_group(pid: int) -> None:
    """SIGKILL the process group ``pid`` leads (a server started in its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def sglang_server(options: SglangOptions, folder: Path, name: str = "sglang") -> EngineServer:
    """An (unstarted) SGLang server on a free loopback port, logging under ``folder``."""
    if not sglang_available(options.venv):
        raise Unavailable(f"no SGLang venv at {sglang_python(options.venv).parent.parent}: "
                          f"run scripts/install_sglang.sh")
    return EngineServer(name, lambda port: sglang_command(options, port), free_port(),
                        folder / f"{name}.log", sglang_environment(folder))


@dataclass(frozen=True, slots=True)
class VllmServerOptions:
    """Flags of one vLLM OpenAI server on the CPU (the tiny model's defaults)."""

    model_path: str
    served_name: str = ""
    max_model_len: int = 2048
    max_num_seqs: int = 16
    num_blocks: int = 0
    #: ``--scheduling-policy priority``: fills (priority 1) wait behind canonical work (0).
    priority_scheduling: bool = True
    #: Where the dynbranch plugin opens its lease channel (``DYNBRANCH_LEASE_CHANNEL``); "": none.
    lease_channel: str = ""
    extra_args: tuple[str, ...] = ()


def vllm_server(options: VllmServerOptions, folder: Path, env: dict[str, str],
                name: str = "vllm") -> EngineServer:
    """An (unstarted) vLLM OpenAI server on a free loopback port (``env``: vLLM's variables);
    with a lease channel, the agent beside it is told where (``agent_settings``)."""
    channel = {LEASE_CHANNEL_ENV: options.lease_channel}
    agent = (f"lease_channel={options.lease_channel}",) if options.lease_channel else ()
    return EngineServer(name, lambda port: vllm_command(options, port), free_port(),
                        folder / f"{name}.log", {**os.environ, **env, **channel},
                        agent_settings=agent)


def vllm_command(options: VllmServerOptions, port: int) -> list[str]:
    """``python -m vllm.entrypoints.openai.api_server ...`` for the CPU (this interpreter)."""
    o = options
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", o.model_path,
           "--host", "127.0.0.1", "--port", str(port), "--enable-prefix-caching",
           "--max-model-len", str(o.max_model_len), "--dtype", "bfloat16", "--enforce-eager",
           "--enable-prompt-tokens-details", "--seed", "0", "--max-num-seqs",
           str(o.max_num_seqs)]
    if o.served_name:
        cmd += ["--served-model-name", o.served_name]
    if o.num_blocks:
        cmd += ["--num-gpu-blocks-override", str(o.num_blocks)]
    if o.priority_scheduling:
        cmd += ["--scheduling-policy", "priority"]
    return [*cmd, *o.extra_args]


def launch_vllm_server(model_path: str, model: str, max_running: int, max_model_len: int,
                       folder: Path, index: int) -> EngineServer:
    """The ``openai`` backend's server (``registry.BackendSpec.launcher``): vLLM's OpenAI server
    serving ``model_path`` as ``model``, with vLLM's variables and folders set up and the
    dynbranch plugin's lease channel on an ``ipc://`` socket in ``folder``."""
    from services.engine_agent.backends.tiny_model import default_cache_root
    from services.engine_agent.backends.vllm.settings import (
        VllmSettings,
        engine_environment,
        make_engine_dirs,
    )

    env = engine_environment(VllmSettings(model_path=model_path), default_cache_root())
    make_engine_dirs(env)
    name = f"vllm-server-{index}"
    return vllm_server(VllmServerOptions(model_path, served_name=model, max_model_len=max_model_len,
                                         max_num_seqs=max_running,
                                         lease_channel=f"ipc://{folder}/{name}-leases.ipc"),
                       folder, env, name)


def launch_sglang_server(model_path: str, model: str, max_running: int, max_model_len: int,
                         folder: Path, index: int) -> EngineServer:
    """The ``sglang`` backend's server (``registry.BackendSpec.launcher``)."""
    return sglang_server(SglangOptions(model_path, served_name=model, max_running=max_running,
                                       context_length=max_model_len), folder,
                         f"sglang-server-{index}")


__all__ = ["DEFAULT_SGLANG_VENV", "LEASE_CHANNEL_ENV", "EngineServer", "SglangOptions",
           "VllmServerOptions", "free_port", "vllm_command", "kill_group", "launch_sglang_server",
           "launch_vllm_server", "sglang_available", "sglang_command", "sglang_python",
           "sglang_server", "tiny_model_for_sglang", "vllm_server"]
