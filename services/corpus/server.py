"""Corpus entry point: ``python -m services.corpus`` (or ``dynbranch serve corpus``).

Start-up opens (or, when new, creates) the LMDB corpus and, while it is empty, loads the
configured data set (``source``); a folder that another process holds, that holds another
corpus, or a data set that is absent stops start-up with exit status 2 and a message naming it.
Shutdown follows the runtime's order, then waits for running LMDB work and closes the corpus.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from opentelemetry.sdk.trace.export import SpanExporter

from services.common.pb import corpus_pb2, corpus_pb2_grpc
from services.common.runtime.cli_args import Flag, service_main
from services.common.runtime.server import ServiceRuntime
from services.common.values.errors import FailedPrecondition, NotFound
from services.corpus.config import CorpusSettings
from services.corpus.core import Corpus
from services.corpus.loaders import load_corpus
from services.corpus.service import CorpusService
from services.corpus.servicer import CorpusCollector, CorpusServicer

log = logging.getLogger(__name__)
SERVICE_NAME = corpus_pb2.DESCRIPTOR.services_by_name["Corpus"].full_name


def open_corpus(settings: CorpusSettings) -> Corpus:
    """The corpus the settings name, loaded from its data set while empty (blocking)."""
    corpus = Corpus(Path(settings.path), settings.name, create=settings.create,
                    map_size=settings.map_size_bytes, sync=settings.sync,
                    refresh_fraction=settings.refresh_fraction)
    try:
        if settings.source:
            loaded = load_corpus(corpus, settings.source, settings.data_dir or None)
            if loaded:
                log.info("corpus %s: loaded %d documents of %s", settings.name, loaded,
                         settings.source)
    except BaseException:
        corpus.close()
        raise
    return corpus


async def build_runtime(settings: CorpusSettings, *,
                        span_exporter: SpanExporter | None = None) -> ServiceRuntime:
    """A runtime serving the Corpus service over an opened corpus (not yet listening)."""
    corpus = await asyncio.to_thread(open_corpus, settings)
    service = CorpusService(corpus, lease_s=settings.write_lease_s)
    runtime = ServiceRuntime("corpus", settings, span_exporter=span_exporter)
    runtime.on_close(service.close)
    runtime.registry.register(CorpusCollector(service))
    runtime.add_service(corpus_pb2_grpc.add_CorpusServicer_to_server,
                        CorpusServicer(service, runtime.tracer, max_k=settings.max_k),
                        SERVICE_NAME)
    return runtime


def main(argv: list[str] | None = None) -> int:
    """Parse flags, load settings, open the corpus, serve until SIGTERM."""
    return service_main(argv, service="corpus", settings_cls=CorpusSettings,
                        description="Run the corpus service: the mesh's one retrieval corpus.",
                        build=build_runtime, fatal=(FailedPrecondition, NotFound),
                        flags=[Flag("--path", "path", "LMDB folder of the corpus",
                                    {"metavar": "DIR"}),
                               Flag("--source", "source", "data set loaded into an empty "
                                    "corpus (hotpotqa, musique, magento)", {"metavar": "NAME"})])


__all__ = ["SERVICE_NAME", "build_runtime", "main", "open_corpus"]
