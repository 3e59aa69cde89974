"""Gateway entry point: ``python -m services.gateway`` (or ``dynbranch serve gateway``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace.export import SpanExporter

from services.admission.client import RemoteAdmission, StaticAdmission
from services.common.pb import gateway_pb2, gateway_pb2_grpc
from services.common.runtime.cli_args import Flag, service_main
from services.common.runtime.server import ServiceRuntime
from services.common.values.errors import InvalidArgument
from services.corpus import Corpus, CorpusService, load_corpus
from services.corpus.client import CorpusClient
from services.delivery.client import DeliveryClient
from services.gateway.adapters.engines import EnginePool
from services.gateway.adapters.library import RemoteLibrary
from services.gateway.adapters.sharded_library import ShardedLibrary
from services.gateway.auth import Authenticator, KeyFileError, KeyFileWatcher, read_key_file
from services.gateway.config import GatewaySettings
from services.gateway.core import GatewayCore, Limits
from services.gateway.execution import Executor
from services.gateway.http.connections import ConnectionLimits
from services.gateway.http.front import HttpFront
from services.gateway.pace import DecodePace
from services.gateway.ports import AdmissionPort, EnginePort, LibraryPort
from services.gateway.reuse.freshness import Freshness
from services.gateway.reuse.library_path import LibraryPath
from services.gateway.reuse.naming import Naming
from services.gateway.reuse.single_flight import SingleFlight
from services.gateway.servicer import CoreCollector, GatewayMetrics, GatewayServicer
from services.gateway.speculation.branches import BranchManager, BranchSettings
from services.gateway.speculation.draft import DraftPredictor
from services.gateway.speculation.predictors import Predictor, default_predictor
from services.gateway.speculation.title_mirror import TitleMirror
from services.gateway.speculation.titles import TITLE_WEIGHT, CorpusTitles
from services.gateway.stages import StageService
from services.gateway.templates import TemplateRegistry, builtin_names, load_builtin, load_template
from services.gateway.tools.corpus_port import CorpusPort
from services.gateway.tools.retrieve import RetrieveTool
from services.gateway.values import Features

log = logging.getLogger(__name__)
SERVICE_NAME = gateway_pb2.DESCRIPTOR.services_by_name["Gateway"].full_name


def build_registry(settings: GatewaySettings) -> TemplateRegistry:
    """Built-in templates plus the configured template files."""
    registry = TemplateRegistry(max_templates=settings.max_templates)
    for name in builtin_names():
        registry.register(load_builtin(name))
    for path in settings.templates:
        registry.register(load_template(path))
    return registry


async def open_corpus(settings: GatewaySettings, runtime: ServiceRuntime) -> CorpusPort | None:
    """The retrieval corpus: the mesh's corpus service (``corpus``), reached once before
    serving; or a corpus this gateway opens itself (``corpus_path``, loaded from the shared
    data set when it is new). Closed by the runtime."""
    if settings.corpus:
        client = CorpusClient(settings.corpus, read_deadline_s=settings.corpus_deadline_s)
        runtime.on_close(client.close)
        info = await client.connect(settings.corpus_connect_timeout_s)
        log.info("corpus service %s: %s, %d documents", settings.corpus, info.identity,
                 info.documents)
        return client
    if not settings.corpus_path:
        return None

    def local() -> Corpus:
        corpus = Corpus(Path(settings.corpus_path), settings.corpus_source or "corpus")
        try:
            if settings.corpus_source:
                load_corpus(corpus, settings.corpus_source, settings.data_dir or None)
        except BaseException:
            corpus.close()
            raise
        return corpus

    service = CorpusService(await asyncio.to_thread(local))
    runtime.on_close(service.close)
    return service


async def corpus_titles(corpus: CorpusPort, runtime: ServiceRuntime) -> CorpusTitles:
    """The title index of the ReAct predictor, indexed now: over a local corpus directly, over
    the corpus service through a mirror the runtime keeps following until it closes."""
    if isinstance(corpus, CorpusService):
        titles = CorpusTitles(corpus.corpus)
        await asyncio.to_thread(titles.refresh)
        return titles
    mirror = TitleMirror(corpus)
    await mirror.sync()
    follower = asyncio.create_task(mirror.follow(), name="corpus-titles")

    async def stop() -> None:
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower

    runtime.on_close(stop)
    titles = CorpusTitles(mirror)
    titles.refresh()
    return titles


class GatewayRuntime(ServiceRuntime):
    """The gateway's runtime: the gRPC server, plus the OpenAI-compatible HTTP front when
    ``http_port >= 0`` (started with the gRPC server, announced on the same line)."""

    settings: GatewaySettings  # build_runtime starts it with the gateway's own

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.http: HttpFront | None = None
        #: The protocol-free core this runtime serves (set by ``build_runtime``); in-process
        #: tests and benchmarks drive it directly.
        self.core: GatewayCore | None = None
        #: Reloads the API keys when ``api_keys_file`` changes (None without a key file).
        self.key_watcher: KeyFileWatcher | None = None

    @property
    def http_port(self) -> int | None:
        """The bound HTTP port (after start), or None when the HTTP front is off."""
        return self.http.port if self.http is not None else None

    @property
    def http_address(self) -> str:
        """``host:port`` of the HTTP front (after start); empty when it is off."""
        port = self.http_port
        return f"{self.settings.host}:{port}" if port is not None else ""

    async def start(self) -> int:
        """Start the gRPC server, then the HTTP front; returns the gRPC port."""
        port = await super().start()
        if self.http is not None:
            await self.http.start(self.settings.host, self.settings.http_port)
        return port

    async def shutdown(self) -> None:
        """As ``ServiceRuntime.shutdown``; ``/healthz`` reports draining from the start."""
        if self.http is not None:
            self.http.draining = True
        await super().shutdown()

    def announce(self, extra: dict[str, Any] | None = None) -> None:
        """The listening line, with ``http_port`` and ``http_address`` when HTTP is on."""
        http = ({"http_port": self.http_port, "http_address": self.http_address}
                if self.http_port is not None else {})
        super().announce({**http, **(extra or {})})


async def build_runtime(settings: GatewaySettings, *,
                        span_exporter: SpanExporter | None = None) -> GatewayRuntime:
    """A runtime serving the Gateway service, connected to engines, csl and admission."""
    keys = read_key_file(settings.api_keys_file) if settings.api_keys_file else settings.api_keys
    runtime = GatewayRuntime("gateway", settings, span_exporter=span_exporter)
    engines = EnginePool(settings.engines)
    runtime.on_close(engines.close)
    await engines.start(settings.engine_connect_timeout_s)
    core = await build_core(settings, runtime, engines)
    runtime.registry.register(CoreCollector(core))
    auth = Authenticator(keys, settings.auth)
    if settings.api_keys_file:
        watcher = KeyFileWatcher(auth, settings.api_keys_file)
        watcher.start()
        runtime.on_close(watcher.close)
        runtime.key_watcher = watcher
    metrics = GatewayMetrics(runtime.registry)
    delivery = DeliveryClient(settings.delivery) if settings.delivery else None
    if delivery is not None:
        runtime.on_close(delivery.close)
    servicer = GatewayServicer(core, auth, metrics, runtime.tracer, settings.call_deadline_s,
                               delivery, max_mux_calls=settings.max_concurrent_rpcs)
    runtime.add_service(gateway_pb2_grpc.add_GatewayServicer_to_server, servicer, SERVICE_NAME)
    runtime.core = core
    runtime.on_drain(servicer.sessions.drain)  # CallMux streams end with their last demand
    if settings.http_port >= 0:
        limits = ConnectionLimits(header_timeout_s=settings.http_header_timeout_s,
                                  body_timeout_s=settings.http_body_timeout_s,
                                  keepalive_timeout_s=settings.http_keepalive_timeout_s,
                                  max_connections=settings.http_max_connections)
        runtime.http = HttpFront(core, auth, deadline_s=settings.call_deadline_s,
                                 tracer=runtime.tracer, observe=metrics.observe,
                                 grace_s=settings.grace_s, limits=limits,
                                 registry=runtime.registry)
        runtime.on_close(runtime.http.close)  # registered last: runs first, before core.close
    return runtime


async def build_core(settings: GatewaySettings, runtime: ServiceRuntime,
                     engines: EnginePort, *, library: LibraryPort | None = None,
                     admission: AdmissionPort | None = None) -> GatewayCore:
    """Wire the protocol-free core; every owned resource is closed by the runtime.

    ``library`` and ``admission`` replace the ports the settings name (an in-process mesh on a
    virtual clock passes its own); the caller then owns them."""
    if library is None:
        library = open_library(settings)
        if library is not None:
            library.start()
            runtime.on_close(library.close)
    if library is None:
        log.warning("no csl configured: exact reuse (C1) and early fill (C2) are off")
    corpus = await open_corpus(settings, runtime)
    tools = {"retrieve": RetrieveTool(corpus)} if corpus is not None else {}
    features = Features(c1=settings.c1 and library is not None,
                        c2=settings.c2 and library is not None)
    registry = build_registry(settings)
    naming = Naming(registry=registry, tools=tools, features=features)
    freshness = Freshness(tools)
    single_flight = SingleFlight(freshness)
    pace = DecodePace()
    executor = Executor(engines=engines, tools=tools, pace=pace)
    branches = None
    if features.c2 and library is not None:  # c2 is on only with a library
        if admission is None:
            admission = (RemoteAdmission(settings.admission) if settings.admission
                         else StaticAdmission(top_k=settings.top_k))
            if isinstance(admission, RemoteAdmission):
                runtime.on_close(admission.close)
        extra: list[tuple[CorpusTitles, float]] = []
        if corpus is not None:  # open-vocabulary hops name corpus titles (ReAct); index at start
            extra.append((await corpus_titles(corpus, runtime), TITLE_WEIGHT))
        predictor: Predictor | DraftPredictor = default_predictor(
            k=max(3, settings.top_k), extra=extra, overlap_weight=settings.overlap_weight)
        if settings.predictor == "draft":
            if settings.draft_model not in engines.models():
                raise InvalidArgument("draft_model", f"{settings.draft_model!r} is served by no "
                                      f"engine (served: {sorted(engines.models())})")
            predictor = DraftPredictor(
                engines, settings.draft_model, max_tokens=settings.draft_max_tokens,
                deadline_s=settings.draft_deadline_s, limit=max(3, settings.top_k),
                resolve=_title_resolver(extra[0][0]) if extra else None)
        branches = BranchManager(executor, library, admission, predictor,
                                 BranchSettings(fill_wait_s=settings.fill_wait_s,
                                                adopt_stall_s=settings.adopt_stall_s,
                                                adopt_check_s=settings.adopt_check_s,
                                                fill_timeout_s=settings.fill_timeout_s,
                                                shadow_ttl_s=settings.shadow_ttl_s,
                                                branch_ttl_s=settings.branch_ttl_s,
                                                max_branches=settings.max_branches),
                                 runtime.tracer, registry=registry, naming=naming,
                                 freshness=freshness, single_flight=single_flight, pace=pace,
                                 features=features)
    stages = StageService(naming=naming, executor=executor,
                          library=LibraryPath(library, freshness, runtime.tracer,
                                              settings.max_pending_stores),
                          single_flight=single_flight, speculation=branches)
    core = GatewayCore(registry=registry, naming=naming, stages=stages, branches=branches,
                       library=library, engines=engines, corpus=corpus,
                       limits=Limits(settings.max_prompt_bytes, settings.max_request_id,
                                     max_in_flight=settings.max_in_flight))
    runtime.on_close(core.close)
    if corpus is not None and library is not None:
        await core.reconcile_at_start()
    return core


def open_library(settings: GatewaySettings) -> RemoteLibrary | ShardedLibrary | None:
    """The library port: one csl, its shards (two or more), or none."""
    targets = settings.csl_shards or ([settings.csl] if settings.csl else [])
    if len(targets) > 1:
        return ShardedLibrary(targets, serving_lease_s=settings.csl_serving_lease_s,
                              renew_interval_s=settings.csl_renew_interval_s)
    return RemoteLibrary(targets[0]) if targets else None


def _title_resolver(titles: CorpusTitles) -> Callable[[str], list[str]]:
    """A draft line to the corpus titles it scores highest for."""
    def resolve(line: str) -> list[str]:
        return [title for title, _ in titles.scores(line)]
    return resolve


def main(argv: list[str] | None = None) -> int:
    """Parse flags, load settings, serve until SIGTERM."""
    return service_main(argv, service="gateway", settings_cls=GatewaySettings,
                        description="Run the gateway in front of engine agents.",
                        build=build_runtime, flags=[
                            Flag("--engine", "engines", "engine agent target (repeatable)",
                                 {"action": "append", "metavar": "HOST:PORT"}),
                            Flag("--csl", "csl", "csl service target", {"metavar": "HOST:PORT"}),
                            Flag("--csl-shard", "csl_shards", "csl shard target (repeatable; "
                                 "instead of --csl)", {"action": "append",
                                                       "metavar": "HOST:PORT"}),
                            Flag("--admission", "admission", "admission service target",
                                 {"metavar": "HOST:PORT"}),
                            Flag("--delivery", "delivery", "delivery service target "
                                 "(DeliverResult forwards there)", {"metavar": "HOST:PORT"}),
                            Flag("--corpus", "corpus", "corpus service target (the mesh's "
                                 "retrieval corpus)", {"metavar": "HOST:PORT"})],
                        fatal=(KeyFileError,))


__all__ = ["SERVICE_NAME", "GatewayRuntime", "build_core", "build_runtime", "main"]
