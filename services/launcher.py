"""Start the whole mesh on loopback, one process per service (``dynbranch up`` / ``demo`` /
benchmarks). Each child binds port 0 and announces its port on its first stdout line; logs go to
one file per service under the run folder.

With a ``RestartPolicy`` the mesh supervises its children as a Deployment or StatefulSet would
its pods: one that exits on its own is started again on the same port with the same flags and
data folder (peers' channels reconnect by themselves), after a back-off, a bounded number of
times per window. Without one (benchmarks, fault tests) a dead child stays down, to be seen."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from services.common.runtime.clients import wait_serving
from services.engine_presets import EngineSetup, engine_setup
from services.restart_policy import RestartBudget, RestartPolicy

log = logging.getLogger(__name__)
ANNOUNCE_TIMEOUT_S = 60.0
#: Starts ``ProcessMesh.restart`` makes of a child that dies before announcing, and the pause before
#: the next one (times the attempt).
RESTART_ATTEMPTS, RESTART_BACKOFF_S = 3, 0.2
#: Longest a restarted child's readiness wait goes without checking that it still runs.
READY_POLL_S = 1.0
#: An agent embedding vLLM announces once its engine started (35-70 s on a busy 2-core CPU).
REAL_ENGINE_ANNOUNCE_TIMEOUT_S = 300.0


class StartFailed(RuntimeError):
    """A child that exited, or was killed for hanging, before it announced its address."""

    def __init__(self, message: str, status: str) -> None:
        super().__init__(message)
        #: How it ended, in words (``killed by SIGKILL``, ``exit status 3``).
        self.status = status


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
    #: How it was started (``restart`` starts it again the same way, on the same port).
    module: str = ""
    args: list[str] = field(default_factory=list)
    #: Killed on purpose (``ProcessMesh.kill``): its exit status does not make the stop unclean, and
    #: the supervisor leaves it to whoever killed it.
    killed: bool = False
    #: Seconds it had to announce (a restart gives it as long).
    announce_timeout_s: float = ANNOUNCE_TIMEOUT_S
    #: The OTLP endpoint it exports spans to, as its settings say ("": tracing off).
    otlp_endpoint: str = ""


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
    #: csl processes: 1 is one library named ``csl``; N > 1 are shards ``csl-0`` … ``csl-{N-1}``,
    #: each with its own LMDB environment, that gateways pick by rendezvous hashing of names.
    csl_shards: int = 1
    #: Gateway replicas behind the same csl and admission: ``gateway``, ``gateway-1``, ….
    gateways: int = 1
    #: Engine backend of every agent (``services.engine_presets``): sim, vllm, openai, sglang;
    #: for a real one ``preset`` names an engine preset (``tiny-cpu``).
    backend: str = "sim"
    #: Running servers the openai/sglang agents speak to (one, or one per engine); none:
    #: launch one per agent.
    engine_urls: tuple[str, ...] = ()
    #: Model folder of a real engine (default: the preset's).
    model_path: str = ""
    #: ``(service name, address) -> address`` the gateways dial instead (a fault proxy in
    #: between, ``loadgen.faults.proxy``); None: each service's own address.
    gateway_route: Callable[[str, str], str] | None = None
    #: The same per gateway (``gateway``, ``gateway-1``, …), before ``gateway_route``: a fault
    #: between one gateway and one service only (a one-sided partition).
    gateway_routes: dict[str, Callable[[str, str], str]] = field(default_factory=dict)
    #: Serving lease of each csl shard (``csl_shards`` > 1), and what the gateways assume.
    csl_serving_lease_s: float = 1.0
    #: The retrieval corpus every gateway shares: its LMDB folder (created when new; "" with a
    #: source: ``corpus`` in the run folder) and the data set loaded while it is empty. Either
    #: one starts the corpus service (``corpus``), which every gateway reaches (``--corpus``);
    #: neither: no corpus, no retrieve tool.
    corpus_path: str = ""
    corpus_source: str = ""
    #: Run the corpus service without a path or source too: an empty corpus in the run folder
    #: that fills through the gateways' writes.
    corpus_empty: bool = False
    #: ``--set KEY=VALUE`` items per service (csl, admission, delivery, corpus; ``csl`` reaches
    #: every shard); engines and gateways take ``engine_settings`` and ``gateway_settings``.
    service_settings: dict[str, list[str]] = field(default_factory=dict)
    #: Gateway ports: gateway ``i`` binds ``port + i``; None: the environment's
    #: ``DYNBRANCH_GATEWAY_[HTTP_]PORT``, else a free port (the HTTP front: 0).
    gateway_grpc_port: int | None = None
    gateway_http_port: int | None = None

    @property
    def corpus(self) -> bool:
        """Whether the mesh runs the corpus service."""
        return bool(self.corpus_path or self.corpus_source or self.corpus_empty)


class ProcessMesh:
    """A set of service processes; ``stop`` is idempotent and also kills stragglers."""

    def __init__(self, run_dir: Path | None = None, keep_run_dir: bool = False,
                 supervise: RestartPolicy | None = None) -> None:
        self._own_run_dir = run_dir is None and not keep_run_dir
        self.run_dir = run_dir or Path(tempfile.mkdtemp(prefix="dynbranch-run-"))
        self.children: list[Child] = []
        self.engine_setup: EngineSetup | None = None
        self._drains: list[asyncio.Task[None]] = []
        #: One line per start of a restarted child that died before announcing (then retried).
        self.failed_starts: list[str] = []
        #: Supervision (None: a child that exits stays down): one watcher task per service.
        self.supervise = supervise
        self._watchers: dict[str, asyncio.Task[None]] = {}
        #: One line per exit the supervisor restarted after, and the services it gave up on.
        self.restarts: list[str] = []
        self.given_up: list[str] = []

    def address(self, name: str) -> str:
        """Address of the first child named ``name``."""
        return next(c.address for c in self.children if c.name == name)

    def child(self, name: str) -> Child:
        """The child named ``name``."""
        return next(c for c in self.children if c.name == name)

    async def spawn(self, name: str, module: str, args: list[str], port: int = 0,
                    timeout_s: float = ANNOUNCE_TIMEOUT_S) -> Child:
        """Start ``python -m module`` and wait for its announcement. Port 0 leaves the port to
        the service's settings: the environment's ``DYNBRANCH_<SVC>_PORT``, else a free one."""
        log_path = self.run_dir / f"{name}.log"
        fixed = ["--port", str(port)] if port else []
        # Its own session: Ctrl-C in a terminal reaches only the launcher, which then
        # stops the children in order (gateways first), not every process at once.
        with open(log_path, "ab") as log_file:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", module, *fixed, *args, stdout=asyncio.subprocess.PIPE,
                stderr=log_file, env=launch_env(name), start_new_session=True)
        try:
            info = await asyncio.wait_for(_announcement(process, log_path), timeout_s)
        except asyncio.CancelledError:  # a restart that stop() cancelled: leave no orphan
            await _end(process)
            raise
        except (asyncio.TimeoutError, EOFError):
            status = await _end(process)
            tail = log_path.read_text()[-2000:]
            raise StartFailed(f"{name} did not start ({_exit_status(status)}); its log "
                              f"{log_path} ends:\n{tail}", _exit_status(status)) from None
        child = Child(name, process, info["address"], info.get("metrics_port"), log_path,
                      info.get("http_address", ""), module, args, announce_timeout_s=timeout_s,
                      otlp_endpoint=info.get("otlp_endpoint", ""))
        # An engine library may log to stdout (embedded vLLM does): keep the pipe drained into
        # the log, or the child blocks once the pipe is full.
        stdout = cast(asyncio.StreamReader, process.stdout)  # started with stdout=PIPE
        self._drains.append(asyncio.create_task(_copy(stdout, log_path)))
        self._place(child)
        self._watch(name)
        return child

    def _place(self, child: Child) -> None:
        """Add ``child``, in the place of a stopped one of its name (a restart keeps the
        order, which ``stop`` follows: gateways first)."""
        for i, old in enumerate(self.children):
            if old.name == child.name and old.process.returncode is not None:
                self.children[i] = child
                return
        self.children.append(child)

    def exited(self) -> list[str]:
        """Names of the children whose process is no longer running."""
        return [c.name for c in self.children if c.process.returncode is not None]

    async def kill(self, name: str) -> None:
        """SIGKILL one child (a fault test: no drain, no clean close) and wait for it; it stays
        down, unsupervised, until ``restart``."""
        await self._unwatch(name)
        child = self.child(name)
        child.killed = True
        if child.process.returncode is None:
            child.process.kill()
        await child.process.wait()

    async def restart(self, name: str, attempts: int = RESTART_ATTEMPTS) -> Child:
        """Start a stopped child again with the same flags, on the same port; like a supervisor,
        try again (up to ``attempts`` starts) when it dies before announcing. It takes the
        child over from the supervisor, which watches the new process."""
        old = self.child(name)
        if old.process.returncode is None:
            raise RuntimeError(f"{name} is still running; stop or kill it first")
        await self._unwatch(name)
        for attempt in range(1, attempts + 1):
            try:
                child = await self._start_again(old)
                break
            except RuntimeError as err:
                if attempt == attempts:
                    raise
                self.failed_starts.append(f"{name}: {str(err).splitlines()[0]}")
                log.warning("restart of %s failed (attempt %d of %d): %s", name, attempt,
                            attempts, str(err).splitlines()[0])
                await asyncio.sleep(RESTART_BACKOFF_S * attempt)
        await wait_serving(child.address)
        return child

    async def _start_again(self, old: Child) -> Child:
        """One start of a stopped child as it was started: same flags, same port."""
        port = int(old.address.rsplit(":", 1)[1])
        return await self.spawn(old.name, old.module, old.args, port=port,
                                timeout_s=old.announce_timeout_s)

    def _watch(self, name: str) -> None:
        """Supervise ``name`` when the mesh supervises and nothing watches it yet (a restart
        the supervisor makes keeps its watcher)."""
        watcher = self._watchers.get(name)
        if self.supervise is not None and (watcher is None or watcher.done()):
            self._watchers[name] = asyncio.create_task(self._supervise(name, self.supervise),
                                                       name=f"supervise {name}")

    async def _unwatch(self, name: str) -> None:
        """End the supervision of ``name`` (a restart it is making is cancelled)."""
        watcher = self._watchers.pop(name, None)
        if watcher is not None:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)

    async def _supervise(self, name: str, policy: RestartPolicy) -> None:
        """Start ``name`` again each time it exits on its own, after the policy's back-off;
        past its limit leave it down. ``kill``, ``restart`` and ``stop`` cancel it."""
        budget, child = RestartBudget(policy), self.child(name)
        ended = _exit_status(await child.process.wait())
        while True:
            exited_at = time.monotonic()
            delay = budget.take(exited_at)
            if delay is None:
                self.given_up.append(name)
                log.error("%s exited (%s) after %d restarts in %.0f s; leaving it down (its log: "
                          "%s)", name, ended, policy.max_restarts, policy.window_s,
                          child.log_path, extra={"service": name})
                return
            self.restarts.append(f"{name}: {ended}")
            log.warning("%s exited (%s); restart %d of at most %d in %.0f s, in %.1f s",
                        name, ended, budget.recent, policy.max_restarts, policy.window_s, delay,
                        extra={"service": name, "restart": budget.recent, "delay_s": delay})
            await asyncio.sleep(delay)
            try:
                child = await self._start_again(child)
            except StartFailed as err:  # it died (or hung) before announcing
                ended = f"before announcing, {err.status}"
                continue
            await self._ready(child, exited_at, policy)
            ended = _exit_status(await child.process.wait())

    @staticmethod
    async def _ready(child: Child, exited_at: float, policy: RestartPolicy) -> None:
        """Wait for a restarted child's SERVING and say so. Readiness, not liveness: one that
        never reports it is left running, and one that exits meanwhile ends the wait (within a
        second) so that its exit is handled."""
        deadline = time.monotonic() + policy.ready_timeout_s
        while child.process.returncode is None:
            try:
                await wait_serving(child.address, READY_POLL_S)
            except TimeoutError:
                if time.monotonic() < deadline:
                    continue
                log.warning("%s restarted but not SERVING after %.0f s", child.name,
                            policy.ready_timeout_s, extra={"service": child.name})
                return
            # WARNING, like the exit it answers: ``dynbranch up`` shows warnings, not INFO.
            log.warning("%s serves again at %s, %.1f s after it exited", child.name,
                        child.address, time.monotonic() - exited_at,
                        extra={"service": child.name})
            return

    async def start(self, spec: MeshSpec) -> None:
        """Engines and the other services in parallel, then the gateway; wait for SERVING."""
        common = ["--log-level", spec.log_level]
        self.engine_setup = setup = await engine_setup(
            spec.backend, spec.preset, spec.engines, spec.model, self.run_dir,
            spec.engine_urls, spec.model_path)
        engine_args = [["--engine-id", f"engine-{i}", "--model", spec.model, *self._sim(spec),
                        *common, *sum((["--set", s] for s in [*setup.settings[i],
                                                              *spec.engine_settings]), [])]
                       for i in range(spec.engines)]
        await asyncio.gather(
            *(self.spawn(f"engine-{i}", "services.engine_agent", a, timeout_s=(
                ANNOUNCE_TIMEOUT_S if spec.backend == "sim" else REAL_ENGINE_ANNOUNCE_TIMEOUT_S))
              for i, a in enumerate(engine_args)),
            *(self.spawn(name, f"services.{module}", [*common, *self._extra(name, spec),
                                                       *_sets(spec, module)])
              for name, module in self._libraries(spec)))
        engines = [c for c in self.children if c.name.startswith("engine-")]
        if "admission" in spec.others:  # it follows the engines' load streams
            await self.spawn("admission", "services.admission", [*common, *sum(
                (["--engine", c.address] for c in engines), []), *_sets(spec, "admission")])
        if "delivery" in spec.others:  # it returns tool results to the engine by id
            await self.spawn("delivery", "services.delivery", [*common, *sum(
                (["--engine", f"{c.name}={c.address}"] for c in engines), []),
                *_sets(spec, "delivery")])
        await asyncio.gather(*(self.spawn(
            gateway_name(i), "services.gateway",
            self._gateway_args(spec, gateway_name(i), engines, common),
            port=_nth_port(spec.gateway_grpc_port, i)) for i in range(spec.gateways)))
        await asyncio.gather(*(wait_serving(c.address) for c in self.children))

    def _gateway_args(self, spec: MeshSpec, gateway: str, engines: list[Child],
                      common: list[str]) -> list[str]:
        """One gateway's flags: every service's address, through its routes."""
        route = (spec.gateway_routes.get(gateway) or spec.gateway_route
                 or (lambda _name, address: address))
        targets = sum((["--engine", route(c.name, c.address)] for c in engines), [])
        for name in ("csl", "admission", "delivery"):
            if name in spec.others and (name != "csl" or spec.csl_shards == 1):
                targets += [f"--{name}", route(name, self.address(name))]
        if spec.corpus:  # one corpus for every gateway: each reaches the same service
            targets += ["--corpus", route("corpus", self.address("corpus"))]
        if "csl" in spec.others and spec.csl_shards > 1:
            targets += sum((["--csl-shard", route(n, self.address(n))]
                            for n, _ in self._libraries(spec) if n.startswith("csl-")), [])
            targets += ["--set", f"csl_serving_lease_s={spec.csl_serving_lease_s}"]
        http = _nth_port(spec.gateway_http_port, gateway_index(gateway))
        ports = ["--set", f"http_port={http}"] if spec.gateway_http_port is not None else []
        return [*targets, *common, *ports,
                *sum((["--set", s] for s in spec.gateway_settings), [])]

    @staticmethod
    def _libraries(spec: MeshSpec) -> list[tuple[str, str]]:
        """``(name, module)`` of the services started beside the engines, before admission:
        the csl, or its shards, and the corpus when the mesh has one."""
        out = [(n, n) for n in spec.others if n not in ("admission", "delivery", "csl")]
        if "csl" in spec.others:
            out += ([("csl", "csl")] if spec.csl_shards == 1 else
                    [(f"csl-{i}", "csl") for i in range(spec.csl_shards)])
        if spec.corpus:
            out.append(("corpus", "corpus"))
        return out

    @staticmethod
    def _sim(spec: MeshSpec) -> list[str]:
        """The sim's own flags (a real backend's preset is not a cost model)."""
        if spec.backend != "sim":
            return []
        return ["--preset", spec.preset, "--time-scale", str(spec.time_scale)]

    def _extra(self, name: str, spec: MeshSpec) -> list[str]:
        """Per-service flags: a csl (or shard) keeps its LMDB environment in the run folder, and
        a shard serves under a lease; the corpus its folder (the given one, else the run
        folder's) and data set."""
        if name == "csl":
            return ["--data-dir", str(self.run_dir / name)]
        if name.startswith("csl-"):
            return ["--data-dir", str(self.run_dir / name),
                    "--set", f"serving_lease_s={spec.csl_serving_lease_s}"]
        if name == "corpus":
            source = ["--source", spec.corpus_source] if spec.corpus_source else []
            return ["--path", spec.corpus_path or str(self.run_dir / "corpus"), *source]
        return []

    async def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the gateways and wait for them, then every other child; SIGKILL what
        outlasts ``timeout_s``. The gateways go first so that their close reports every open
        branch's outcome to admission while it still serves. A temporary run folder (logs, csl
        store) is removed when every child stopped cleanly and none was restarted, kept
        otherwise. Supervision ends first, so no restart races the stop."""
        for name in list(self._watchers):
            await self._unwatch(name)
        gateways = [c for c in self.children if gateway_index(c.name) >= 0]
        rest = [c for c in reversed(self.children) if c not in gateways]
        clean = await self._terminate(gateways, timeout_s)
        clean = await self._terminate(rest, timeout_s) and clean and not self.restarts
        self.children = []
        for task in self._drains:  # they end at the children's EOF
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(task, 5.0)
        self._drains = []
        if self.engine_setup is not None:  # the engine servers after the agents over them
            await self.engine_setup.stop()
            self.engine_setup = None
        if clean and self._own_run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        elif not clean:
            log.warning("a service was restarted or did not stop cleanly; its logs are in %s",
                        self.run_dir)


    @staticmethod
    async def _terminate(children: list[Child], timeout_s: float) -> bool:
        """SIGTERM ``children`` at once and wait for each; whether all exited cleanly."""
        for child in children:
            if child.process.returncode is None:
                child.process.send_signal(signal.SIGTERM)
        clean = True
        for child in children:
            try:
                await asyncio.wait_for(child.process.wait(), timeout_s)
            except asyncio.TimeoutError:
                log.warning("%s did not stop in %.0f s; killing it", child.name, timeout_s)
                child.process.kill()
                await child.process.wait()
            clean = clean and (child.process.returncode == 0 or child.killed)
        return clean


#: What the launcher sets in a child's environment unless the operator's environment sets it
#: (explicit ``--set`` flags win over both): a local mesh's gateways take no API keys and serve
#: the HTTP front on a free port.
LAUNCH_DEFAULTS = {"gateway": {"AUTH": "false", "HTTP_PORT": "0"}}


def service_of(name: str) -> str:
    """The service a child runs (``engine-1`` -> ``engine``, ``csl-0`` -> ``csl``)."""
    return name.split("-", 1)[0]


def launch_env(name: str) -> dict[str, str]:
    """A child's environment: the launcher's defaults for its service under this one."""
    service = service_of(name)
    defaults = {f"DYNBRANCH_{service.upper()}_{key}": value
                for key, value in LAUNCH_DEFAULTS.get(service, {}).items()}
    return {**defaults, **os.environ}


def gateway_name(index: int) -> str:
    """The ``index``-th gateway's name: ``gateway``, ``gateway-1``, …."""
    return "gateway" if index == 0 else f"gateway-{index}"


def gateway_index(name: str) -> int:
    """The index of the gateway called ``name``; -1 for another service."""
    if name == "gateway":
        return 0
    head, _, tail = name.partition("-")
    return int(tail) if head == "gateway" and tail.isdigit() else -1


def _nth_port(base: int | None, index: int) -> int:
    """Replica ``index``'s port from a base: consecutive from a real port; 0 or None: a free
    one each; -1 (off) for each."""
    if base is None or base <= 0:
        return base or 0
    return base + index


def _sets(spec: MeshSpec, service: str) -> list[str]:
    """``--set`` flags of one service's ``service_settings``."""
    return sum((["--set", item] for item in spec.service_settings.get(service, [])), [])


async def _end(process: asyncio.subprocess.Process) -> int:
    """Kill ``process`` if it still runs; its exit status."""
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):  # it may exit meanwhile
            process.kill()
    return await process.wait()


def _exit_status(code: int) -> str:
    """A child's exit status in words (a negative code is the signal that ended it)."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit status {code}"


async def _announcement(process: asyncio.subprocess.Process, log_path: Path
                        ) -> dict[str, Any]:
    """The child's JSON announcement line; other stdout lines before it go to its log."""
    stdout = cast(asyncio.StreamReader, process.stdout)  # started with stdout=PIPE
    while True:
        line = await stdout.readline()
        if not line:
            raise EOFError
        with contextlib.suppress(json.JSONDecodeError):
            info = json.loads(line)
            if isinstance(info, dict) and "address" in info:
                return info
        with open(log_path, "ab") as out:
            out.write(line)


async def _copy(stream: asyncio.StreamReader, log_path: Path) -> None:
    """Append ``stream`` to the log until EOF."""
    while line := await stream.readline():
        with open(log_path, "ab") as out:
            out.write(line)


__all__ = ["Child", "LAUNCH_DEFAULTS", "ProcessMesh", "MeshSpec", "RestartPolicy", "StartFailed",
           "gateway_index", "gateway_name", "launch_env", "service_of"]
