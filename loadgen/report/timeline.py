"""One Routing workflow under the floor and the full arm, as a timeline (Gantt) of its stage calls
and the fills the gateway ran for it (dynbranch Figure 12's case study).

Each arm runs the same workflow on a fresh in-process mesh whose gateway exports its
OpenTelemetry spans to memory: ``gateway.call`` spans are the workflow's canonical stage calls,
``fill.run`` spans the fills of its branches. Times are simulated seconds from the workflow's
first call (wall seconds over the engines' time scale). A call answered by a fill, or by an
identical call in flight, ran nothing on the engine: it is drawn as the wait it was (hollow and
hatched, ``STYLES``), never as a stage call.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loadgen.arms.runner import run_schedule
from loadgen.meshes.config import MeshConfig
from loadgen.meshes.live import in_process_mesh
from loadgen.workloads import build_schedule, get_workload
from loadgen.workloads.base import SimClock


@dataclass(frozen=True, slots=True)
class Bar:
    """One span on the timeline."""

    row: str
    kind: str  # "call" or "fill"
    start_s: float
    end_s: float
    #: A call's answer source (engine, library, promoted_fill, joined); "" for a fill.
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


#: How a bar is drawn, by what it was: (legend text, bar style). A demand answered by a fill
#: (promoted, or an identical call in flight) ran nothing on the engine: its bar is the wait for
#: that execution, drawn hollow and hatched, never as a stage call.
STYLES: dict[str, tuple[str, dict[str, Any]]] = {
    "engine": ("stage call, run on the engine", {"color": "tab:blue"}),
    "fill": ("fill: a candidate branch run ahead", {"color": "tab:orange"}),
    "promoted_fill": ("demand waiting for its fill (no engine call)",
                      {"facecolor": "white", "edgecolor": "tab:orange", "hatch": "////"}),
    "joined": ("demand waiting for the same call in flight (no engine call)",
               {"facecolor": "white", "edgecolor": "tab:blue", "hatch": "...."}),
    "library": ("demand served from the library (no engine call)",
                {"facecolor": "white", "edgecolor": "tab:green", "hatch": "xxxx"}),
}


def style_of(bar: Bar) -> str:
    """The ``STYLES`` key of a bar: a fill, or a stage call by where its answer came from (an
    unknown source is drawn as an engine call)."""
    if bar.kind == "fill":
        return "fill"
    return bar.label if bar.label in STYLES else "engine"


def plot(by_arm: dict[str, list[Bar]], path: Path, title: str) -> Path:
    """One panel per arm: a row per stage call and per fill; a legend says what each bar is."""
    from matplotlib.patches import Patch

    from loadgen.report.plots import _save, plt

    fig, axes = plt.subplots(len(by_arm), 1, figsize=(9.0, 1.2 + 0.9 * len(by_arm) * 2),
                             sharex=True, squeeze=False)
    seen: dict[str, None] = {}
    for ax, (arm, arm_bars) in zip(axes[:, 0], by_arm.items(), strict=True):
        rows = list(dict.fromkeys(b.row for b in arm_bars))
        for b in arm_bars:
            key = style_of(b)
            seen[key] = None
            ax.barh(rows.index(b.row), b.end_s - b.start_s, left=b.start_s, height=0.6,
                    linewidth=1.0, **STYLES[key][1])
        ax.set_yticks(range(len(rows)), rows, fontsize=7)
        ax.invert_yaxis()
        ax.set_title(f"{arm} (the workflow ends at "
                     f"{max((b.end_s for b in arm_bars), default=0):.1f} s)", fontsize=8)
    axes[-1, 0].set_xlabel("simulated s from the workflow's first call")
    axes[0, 0].legend(handles=[Patch(label=STYLES[k][0], linewidth=1.0, **STYLES[k][1])
                               for k in STYLES if k in seen],
                      fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(title, fontsize=9)
    return _save(fig, path)


async def routing_timeline(path: Path, config: MeshConfig | None = None, seed: int = 0
                           ) -> Path:
    """Capture and plot one Routing workflow under the floor and the full arm."""
    config = config or MeshConfig()
    by_arm = {arm: await capture(arm, config, seed) for arm in ("floor", "full")}
    label = f"{config.engines} × {config.preset}, SIMULATED engine"
    return plot(by_arm, path, f"One Routing workflow under the floor and the full arm: its "
                f"stage calls, the fills run for it and its waits for them ({label})")


__all__ = ["STYLES", "Bar", "bars", "capture", "plot", "routing_timeline", "style_of"]
