"""One Routing workflow under the floor and the full arm, as a timeline (Gantt) of its stage calls
and the fills the gateway ran for it (dynbranch Figure 12's case study).

Each arm runs the same workflow on a fresh in-process mesh whose gateway exports its
OpenTelemetry spans to memory: ``gateway.call`` spans are the workflow's canonical stage calls,
``fill.run`` spans the fills of its branches. Times are simulated seconds from the workflow's
first call (wall seconds over the engines' time scale).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loadgen.arms import MeshConfig, in_process_mesh, run_schedule
from loadgen.workloads import build_schedule, get_workload
from loadgen.workloads.base import SimClock


@dataclass(frozen=True, slots=True)
class Bar:
    """One span on the timeline."""

    row: str
    kind: str  # "call" or "fill"
    start_s: float
    end_s: float
    label: str = ""


async def capture(arm: str, config: MeshConfig, seed: int = 0) -> list[Bar]:
    """The bars of one Routing workflow under ``arm``."""
    workload = get_workload("routing")
    schedule = build_schedule(workload, 1, seed=seed, arrival="serial")
    exporter = InMemorySpanExporter()
    async with in_process_mesh(config, arm, workload.corpus_source,
                               span_exporter=exporter) as mesh:
        await run_schedule(mesh.address, workload, schedule, SimClock(config.time_scale))
    return bars(exporter.get_finished_spans(), config.time_scale)


def bars(spans: Any, time_scale: float) -> list[Bar]:
    """Canonical calls and fills from a gateway's finished spans, from the first call on."""
    calls = [s for s in spans if s.name == "gateway.call"]
    fills = [s for s in spans if s.name == "fill.run"]
    if not calls:
        return []
    t0 = min(s.start_time for s in calls)

    def sim(ns: int) -> float:
        return (ns - t0) / 1e9 / time_scale

    out = [Bar(str(s.attributes.get("dynbranch.stage_id", "call")), "call", sim(s.start_time),
               sim(s.end_time), str(s.attributes.get("dynbranch.source", ""))) for s in calls]
    out += [Bar(f"fill: {s.attributes.get('dynbranch.candidate', '')}", "fill", sim(s.start_time),
                sim(s.end_time)) for s in fills]
    return sorted(out, key=lambda b: b.start_s)


def plot(by_arm: dict[str, list[Bar]], path: Path, title: str) -> Path:
    """One panel per arm: a row per stage call and per fill."""
    from loadgen.report_plots import _save, plt

    fig, axes = plt.subplots(len(by_arm), 1, figsize=(7.0, 1.2 + 0.9 * len(by_arm) * 2),
                             sharex=True, squeeze=False)
    for ax, (arm, arm_bars) in zip(axes[:, 0], by_arm.items(), strict=True):
        rows = list(dict.fromkeys(b.row for b in arm_bars))
        for b in arm_bars:
            y = rows.index(b.row)
            color = "tab:orange" if b.kind == "fill" else "tab:blue"
            ax.barh(y, b.end_s - b.start_s, left=b.start_s, color=color, height=0.6)
            if b.label and b.label != "engine":
                ax.text(b.end_s, y, f" {b.label}", va="center", fontsize=6)
        ax.set_yticks(range(len(rows)), rows, fontsize=6)
        ax.invert_yaxis()
        ax.set_title(f"{arm} (end {max((b.end_s for b in arm_bars), default=0):.1f} s)",
                     fontsize=8)
    axes[-1, 0].set_xlabel("simulated s from the workflow's first call")
    fig.suptitle(title, fontsize=9)
    return _save(fig, path)


async def routing_timeline(path: Path, config: MeshConfig | None = None, seed: int = 0
                           ) -> Path:
    """Capture and plot one Routing workflow under the floor and the full arm."""
    config = config or MeshConfig()
    by_arm = {arm: await capture(arm, config, seed) for arm in ("floor", "full")}
    label = f"{config.engines} × {config.preset}, SIMULATED engine"
    return plot(by_arm, path, f"One Routing workflow: stage calls (blue) and fills (orange), "
                f"{label}")


__all__ = ["Bar", "bars", "capture", "plot", "routing_timeline"]
