"""Start the whole mesh on loopback, one process per service (``dynbranch up`` / ``demo`` /
benchmarks). Each child binds port 0 and announces its port on its first stdout line; logs go to
one file per service under the run folder."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from services.common.clients import wait_serving

log = logging.getLogger(__name__)
ANNOUNCE_TIMEOUT_S = 60.0


@dataclass(slots=True)
class Child:
    """One running service process."""

    name: str
    process: asyncio.subprocess.Process
    address: str
    metrics_port: int | None
    log_path: Path
    #: ``host:port`` of the OpenAI-compatible HTTP front (the gateway only; empty otherwise).
    http_address: str = ""


@dataclass(slots=True)
class MeshSpec:
    """What to start."""

    engines: int = 2
    model: str = "qwen3-32b"
    preset: str = "qwen3-32b-h200"
    time_scale: float = 1.0
    engine_settings: list[str] = field(default_factory=list)
    gateway_settings: list[str] = field(default_factory=list)
    #: Services started besides engines and the gateway.
    others: tuple[str, ...] = ("csl", "admission", "delivery")
    log_level: str = "INFO"


class Mesh:
    """A set of service processes; ``stop`` is idempotent and also kills stragglers."""

    def __init__(self, run_dir: Path | None = None, keep_run_dir: bool = False) -> None:
        self._own_run_dir = run_dir is None and not keep_run_dir
        self.run_dir = run_dir or Path(tempfile.mkdtemp(prefix="dynbranch-run-"))
        self.children: list[Child] = []

    def address(self, name: str) -> str:
        """Address of the first child named ``name``."""
        return next(c.address for c in self.children if c.name == name)

    async def spawn(self, name: str, module: str, args: list[str]) -> Child:
        """Start ``python -m module`` and wait for its announcement."""
        log_path = self.run_dir / f"{name}.log"
        with open(log_path, "ab") as log_file:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", module, "--port", "0", "--metrics-port", "0", *args,
                stdout=asyncio.subprocess.PIPE, stderr=log_file, env={**os.environ})
        try:
            line = await asyncio.wait_for(process.stdout.readline(), ANNOUNCE_TIMEOUT_S)
            info = json.loads(line)
        except (asyncio.TimeoutError, json.JSONDecodeError):
            process.kill()
            await process.wait()
            tail = log_path.read_text()[-2000:]
            raise RuntimeError(f"{name} did not start; its log {log_path} ends:\n{tail}") from None
        child = Child(name, process, info["address"], info.get("metrics_port"), log_path,
                      info.get("http_address", ""))
        self.children.append(child)
        return child

    async def start(self, spec: MeshSpec) -> None:
        """Engines and the other services in parallel, then the gateway; wait for SERVING."""
        common = ["--log-level", spec.log_level]
        engine_args = [["--engine-id", f"engine-{i}", "--model", spec.model, "--preset",
                        spec.preset, "--time-scale", str(spec.time_scale), *common,
                        *sum((["--set", s] for s in spec.engine_settings), [])]
                       for i in range(spec.engines)]
        await asyncio.gather(
            *(self.spawn(f"engine-{i}", "services.engine_agent", a)
              for i, a in enumerate(engine_args)),
            *(self.spawn(name, f"services.{name}", [*common, *self._extra(name)])
              for name in spec.others if name not in ("admission", "delivery")))
        engines = [c for c in self.children if c.name.startswith("engine-")]
        targets = sum((["--engine", c.address] for c in engines), [])
        if "admission" in spec.others:  # it follows the engines' load streams
            await self.spawn("admission", "services.admission", [*common, *targets])
        if "delivery" in spec.others:  # it returns tool results to the engine by id
            await self.spawn("delivery", "services.delivery", [*common, *sum(
                (["--engine", f"{c.name}={c.address}"] for c in engines), [])])
        for name in ("csl", "admission", "delivery"):
            if name in spec.others:
                targets += [f"--{name}", self.address(name)]
        await self.spawn("gateway", "services.gateway", [
            *targets, *common, "--set", "auth=false", "--set", "http_port=0",
            *sum((["--set", s] for s in spec.gateway_settings), [])])
        await asyncio.gather(*(wait_serving(c.address) for c in self.children))

    def _extra(self, name: str) -> list[str]:
        """Per-service flags: the csl keeps its LMDB environment in the run folder."""
        if name == "csl":
            return ["--data-dir", str(self.run_dir / "csl")]
        return []

    async def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM every child (gateway first), wait, then SIGKILL what is left. A temporary run
        folder (logs, csl store) is removed when every child stopped cleanly, kept otherwise."""
        clean = True
        for child in reversed(self.children):
            if child.process.returncode is None:
                child.process.send_signal(signal.SIGTERM)
        for child in reversed(self.children):
            try:
                await asyncio.wait_for(child.process.wait(), timeout_s)
            except asyncio.TimeoutError:
                log.warning("%s did not stop in %.0f s; killing it", child.name, timeout_s)
                child.process.kill()
                await child.process.wait()
            clean = clean and child.process.returncode == 0
        self.children = []
        if clean and self._own_run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        elif not clean:
            log.warning("a service did not stop cleanly; its logs are in %s", self.run_dir)


__all__ = ["Child", "Mesh", "MeshSpec"]
