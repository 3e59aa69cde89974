"""Every service's ``/metrics``: its own families beside the process (``process_*``) and
interpreter (``python_*``) ones, each with a HELP text written for it, not generated from its
name."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from collections.abc import Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from services.gateway.adapters.sharded_library import SHARD_COUNTERS
from services.gateway.core import CoreStats
from services.gateway.servicer import CoreCollector
from services.gateway.speculation.branches import BRANCH_COUNTERS
from tests.factories import MODEL

#: Each service's own metric prefix.
PREFIXES = {"engine_agent": "dynbranch_engine_", "csl": "dynbranch_csl_",
            "corpus": "dynbranch_corpus_", "admission": "dynbranch_admission_",
            "delivery": "dynbranch_delivery_", "gateway": "dynbranch_gateway_"}


def written(families: Iterable[tuple[str, str]]) -> list[str]:
    """What is wrong with the HELP texts of ``(name, help)`` families ([] when nothing): each
    must be a phrase (a capital or a digit first, two words or more) that names no part of its
    metric's name with underscores, and no two of the service's own may be the same once the
    words of their names are taken out (``Sharded library count: renewals`` / ``...: folded``)."""
    faults, seen = [], {}
    for name, text in families:
        words = re.findall(r"[A-Za-z0-9_]+", text)
        if len(words) < 2 or not (text[:1].isupper() or text[:1].isdigit()) or text == name:
            faults.append(f"{name}: {text!r} is not a written description")
        faults += [f"{name}: {text!r} quotes its name ({w})" for w in words
                   if "_" in w and w.lower() in name]
        if name.startswith("dynbranch_"):
            rest = " ".join(w.lower() for w in words if w.lower() not in name.split("_"))
            if rest in seen:
                faults.append(f"{name} and {seen[rest]}: one HELP text but for their names")
            seen[rest] = name
    return faults


def test_the_check_catches_help_generated_from_names() -> None:
    generated = [("dynbranch_gateway_branch_winners_lost_confirmed",
                  "Branch lifecycle count: winners_lost_confirmed"),
                 ("dynbranch_gateway_csl_shard_renewals", "Sharded library count: renewals"),
                 ("dynbranch_gateway_csl_shard_folded", "Sharded library count: folded"),
                 ("dynbranch_x", "dynbranch_x"), ("dynbranch_y", "probe")]
    assert len(written(generated)) == 5


def test_every_gateway_counter_has_a_written_help_text() -> None:
    """Every key of the branch manager's and a sharded library's counter tables, as the
    collector exports them (the tables' keys are the descriptions' keys)."""
    core = type("Core", (), {"stats": lambda self: CoreStats(
        branches=dict.fromkeys(BRANCH_COUNTERS, 1), mirror=(True, 0),
        shards=(("s0", True),), library=dict.fromkeys(SHARD_COUNTERS, 1))})()
    registry = CollectorRegistry()
    registry.register(CoreCollector(core))
    families = list(registry.collect())
    assert len(families) == len(BRANCH_COUNTERS) + len(SHARD_COUNTERS) + 3
    assert written((f.name, f.documentation) for f in families) == []


@asynccontextmanager
async def _mesh(tmp_path: Path) -> Any:
    """One of each service, each serving ``/metrics`` on a free port; the gateway with its
    HTTP front, a csl (so it runs branches) and the engine. They stop together."""
    from services.admission.config import AdmissionSettings
    from services.admission.server import build_runtime as build_admission
    from services.corpus.config import CorpusSettings
    from services.corpus.server import build_runtime as build_corpus
    from services.csl.config import CslSettings
    from services.csl.server import build_runtime as build_csl
    from services.delivery.config import DeliverySettings
    from services.delivery.server import build_runtime as build_delivery
    from services.engine_agent.config import EngineAgentSettings
    from services.engine_agent.server import build_runtime as build_engine
    from services.gateway.config import GatewaySettings
    from services.gateway.server import build_runtime as build_gateway

    common = {"metrics_port": 0, "grace_s": 0.1}
    services: dict[str, Any] = {}

    async def start(name: str, runtime: Any) -> Any:
        services[name] = runtime
        await runtime.start()
        return runtime

    try:
        eng = await start("engine_agent", await build_engine(EngineAgentSettings(
            model=MODEL, preset="zero", time_scale=0.0, **common)))
        csl = await start("csl", await build_csl(CslSettings(
            data_dir=str(tmp_path / "csl"), sync=False, **common)))
        await start("corpus", await build_corpus(CorpusSettings(
            path=str(tmp_path / "corpus"), sync=False, **common)))
        await start("admission", await build_admission(AdmissionSettings(**common)))
        await start("delivery", await build_delivery(DeliverySettings(
            engines=[f"engine-0={eng.address}"], **common)))
        await start("gateway", await build_gateway(GatewaySettings(
            engines=[eng.address], csl=csl.address, auth=False, http_port=0, **common)))
        yield services
    finally:
        await asyncio.gather(*(runtime.shutdown() for runtime in services.values()))


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        return reply.read().decode()


async def test_every_service_exports_its_own_process_and_python_metrics(tmp_path: Path) -> None:
    async with _mesh(tmp_path) as services:
        base = f"http://127.0.0.1:{services['gateway'].http_port}"
        async with httpx.AsyncClient(timeout=10) as client:
            ok = await client.post(f"{base}/v1/chat/completions", json={
                "model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4})
            assert ok.status_code == 200
        pages = {name: await asyncio.to_thread(_scrape, runtime.metrics.port)
                 for name, runtime in services.items()}
    faults = []
    for service, page in pages.items():
        families = {f.name: f.documentation for f in text_string_to_metric_families(page)
                    if not f.name.endswith("_created")}  # each counter's creation time
        for prefix in (PREFIXES[service], "process_", "python_"):
            if not any(name.startswith(prefix) for name in families):
                faults.append(f"{service}: no {prefix}* family")
        faults += [f"{service}: {fault}" for fault in written(families.items())]
    assert faults == []
    assert 'route="/v1/chat/completions"' in pages["gateway"]
    assert "process_cpu_seconds_total" in pages["delivery"]
