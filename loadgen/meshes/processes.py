"""One arm on the mesh as production runs it: every service its own process (``--clock
processes``), the cross-check of the virtual clock in wall time.

``services.launcher`` starts the engine agents (sim, at the run's time scale), the csl, admission
when the arm has a policy, the corpus service when the workload retrieves, and the gateway, each
as ``python -m services.<name>`` on loopback, exactly as ``dynbranch up`` does; the harness
speaks to the gateway over real gRPC. Every duration the services decide by is given in the
run's clock (simulated seconds × time scale).
The gateway's counters are read from its Prometheus endpoint; engine seconds per priority are
not exported, so an arm on this mesh reports no engine-second figures.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from services.launcher import MeshSpec, ProcessMesh


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``values`` in this process's environment while children start (they inherit it)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def gateway_counters(metrics_port: int, names: tuple[str, ...]) -> dict[str, int]:
    """The gateway's branch counters and joined calls from its Prometheus endpoint."""
    text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5.0).text
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (sample.name.startswith("dynbranch_gateway_branch_")
                    and sample.name.endswith("_total")):
                key = sample.name.removeprefix("dynbranch_gateway_branch_")
                found[key.removesuffix("_total")] = sample.value
            elif (sample.name == "dynbranch_gateway_calls_total"
                  and sample.labels.get("source") == "joined"):
                found["joined"] = sample.value
    return {name: int(found.get(name, 0)) for name in names}


@contextlib.asynccontextmanager
async def process_mesh(*, engines: int, model: str, preset: str, time_scale: float,
                       gateway: dict[str, Any], admission: dict[str, Any] | None,
                       corpus_source: str = "", data_dir: str = ""):
    """Start the processes; yield the launcher's ``ProcessMesh`` (the gateway is ``gateway``).
    ``corpus_source``: the corpus service loads it (from ``data_dir``, "" the default)."""
    env = {f"DYNBRANCH_ADMISSION_{k.upper()}": str(v) for k, v in (admission or {}).items()}
    if corpus_source and data_dir:
        env["DYNBRANCH_CORPUS_DATA_DIR"] = data_dir
    spec = MeshSpec(engines=engines, model=model, preset=preset, time_scale=time_scale,
                    others=("csl", "admission") if admission is not None else ("csl",),
                    gateway_settings=[f"{k}={_value(v)}" for k, v in gateway.items()],
                    log_level="WARNING", corpus_source=corpus_source)
    mesh = ProcessMesh()
    try:
        with _environment(env):
            await mesh.start(spec)
        yield mesh
    finally:
        await mesh.stop()


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


__all__ = ["gateway_counters", "process_mesh"]
