"""Admission entry point: ``python -m services.admission`` (or ``dynbranch serve admission``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from opentelemetry.sdk.trace.export import SpanExporter

from services.admission import replay as replay_file
from services.admission import state_store
from services.admission.adapters.engine_load import LoadWatcher
from services.admission.config import AdmissionSettings
from services.admission.core import AdmissionPolicy, PricedController
from services.admission.load_view import LoadTracker
from services.admission.policies import build_policy
from services.admission.servicer import AdmissionServicer
from services.common.pb import admission_pb2, admission_pb2_grpc
from services.common.runtime.cli_args import Flag, service_main
from services.common.runtime.server import ServiceRuntime

log = logging.getLogger(__name__)
SERVICE_NAME = admission_pb2.DESCRIPTOR.services_by_name["Admission"].full_name


class AdmissionRuntime(ServiceRuntime):
    """The admission service's runtime; ``policy`` is the policy it serves (in-process tests and
    benchmarks read its records)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.policy: AdmissionPolicy | None = None


async def build_runtime(settings: AdmissionSettings, *,
                        span_exporter: SpanExporter | None = None) -> AdmissionRuntime:
    """A runtime serving the Admission service, following the engines' load streams."""
    runtime = AdmissionRuntime("admission", settings, span_exporter=span_exporter)
    tracker = LoadTracker(window_s=settings.window_s, max_age_s=settings.max_age_s,
                          fill_share=settings.fill_share,
                          kv_budget_share=settings.kv_budget_share)
    if settings.engines:
        watcher = LoadWatcher(tracker, list(settings.engines), settings.load_interval_s)
        watcher.start()
        runtime.on_close(watcher.close)
    policy = runtime.policy = build_policy(settings, tracker)
    if settings.snapshot_path and isinstance(policy, PricedController):
        runtime.on_close(_snapshot_writer(policy, settings.snapshot_path))
    if settings.state_path and isinstance(policy, PricedController):
        saved = await asyncio.to_thread(state_store.load, settings.state_path)
        if saved is not None:
            log.info("admission: restored %d branch classes from %s", policy.restore(saved),
                     settings.state_path)
        runtime.on_close(_state_keeper(policy, settings.state_path, settings.state_interval_s))
    servicer = AdmissionServicer(policy, runtime.registry, runtime.tracer)
    runtime.add_service(admission_pb2_grpc.add_AdmissionServicer_to_server, servicer, SERVICE_NAME)
    return runtime


def _state_keeper(policy: PricedController, path: str,
                  interval_s: float) -> Callable[[], Awaitable[None]]:
    """Save the learned state every ``interval_s`` (off the event loop); the returned close
    hook stops the saver and saves once more."""
    async def keep() -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await asyncio.to_thread(state_store.save, path, policy.state())
            except OSError as exc:
                log.warning("admission: state not saved to %s: %s", path, exc)

    task = asyncio.get_running_loop().create_task(keep(), name="admission-state")

    async def stop() -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await asyncio.to_thread(state_store.save, path, policy.state())
        log.info("admission: saved its learned state to %s", path)
    return stop


def _snapshot_writer(policy: PricedController, path: str) -> Callable[[], Awaitable[None]]:
    async def write_snapshots() -> None:
        written = await asyncio.to_thread(replay_file.write, path, list(policy.snapshots))
        log.info("wrote %d admission decisions to %s", written, path)
    return write_snapshots


def main(argv: list[str] | None = None) -> int:
    """Parse flags, load settings, serve until SIGTERM."""
    return service_main(argv, service="admission", settings_cls=AdmissionSettings,
                        description="Run the admission service (load-priced admission, C3).",
                        build=build_runtime, flags=[
                            Flag("--engine", "engines", "engine agent whose load prices "
                                 "admission (repeatable)",
                                 {"action": "append", "metavar": "HOST:PORT"})])


__all__ = ["SERVICE_NAME", "AdmissionRuntime", "build_runtime", "main"]
