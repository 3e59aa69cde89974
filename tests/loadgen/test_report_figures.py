"""Every figure the report draws, drawn from real results and checked as a reader sees it: no
two text labels overlap, colours have a legend, units are the summary's.

The results are ``fixtures/report_results.json``: a ``dynbranch report`` quick run's cells and,
at reduced size, Routing's λ sweep, the replay-rate sweep, ``bench lads --quick`` and the Routing
timeline, trimmed to the fields the report reads (``fixtures/make_report_results.py`` makes it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.text import Text

from loadgen.arms.specs import ALL_ARMS
from loadgen.report import plots as report_plots
from loadgen.report.plots import figure10, figure_lads
from loadgen.report.runner import c3_figures, write_report
from loadgen.report.timeline import STYLES, Bar, plot, style_of

FIXTURE = Path(__file__).with_name("fixtures") / "report_results.json"
#: Boxes may touch; they overlap when they share more than this many pixels each way.
TOLERANCE_PX = 1.0


@pytest.fixture(scope="module")
def real() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Figure]]:
    """The figures the report saves, by file name, kept open (``_save`` closes them)."""
    figures: dict[str, Figure] = {}
    save = Figure.savefig

    def keep(fig: Figure, path: Any, *args: Any, **kwargs: Any) -> None:
        save(fig, path, *args, **kwargs)
        figures[Path(path).name] = fig

    monkeypatch.setattr(Figure, "savefig", keep)
    monkeypatch.setattr(report_plots.plt, "close", lambda fig=None: None)
    yield figures
    for fig in figures.values():
        report_plots.plt.close(fig)


def labels(fig: Figure, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Every text the renderer draws (titles, axis labels, tick labels, legend texts,
    annotations), visible and not empty, with its box in display pixels."""
    texts: list[Text] = []
    draw = Text.draw

    def recording(self: Text, renderer: Any) -> None:
        draw(self, renderer)
        if self.get_visible() and self.get_text().strip():
            texts.append(self)

    with monkeypatch.context() as m:
        m.setattr(Text, "draw", recording)
        fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [(t.get_text(), t.get_window_extent(renderer)) for t in dict.fromkeys(texts)]


def overlaps(fig: Figure, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Pairs of labels whose boxes overlap (zero-area boxes are skipped)."""
    boxes = [(text, box) for text, box in labels(fig, monkeypatch)
             if box.width > 0 and box.height > 0]
    found = []
    for (a, p), (b, q) in combinations(boxes, 2):
        dx = min(p.x1, q.x1) - max(p.x0, q.x0)
        dy = min(p.y1, q.y1) - max(p.y0, q.y0)
        if dx > TOLERANCE_PX and dy > TOLERANCE_PX:
            found.append((a, b))
    return found


def every_figure(real: dict[str, Any], out: Path) -> None:
    """Draw what the report draws: the quick matrix's figures (write_report), the C3 sweep's
    and decomposition, the replay-rate sweep, LADS and the timeline."""
    label = "4 × qwen3-32b-h200, SIMULATED engine, virtual clock, 0.5 ms per hop"
    plots = c3_figures({"sweeps": {"routing": real["routing_by_lambda"]}}, out, label)
    plots.append(figure10(real["react_by_replay_rate"], out / "fig10_replay_rate.png",
                          f"react: speedup vs exact-replay rate ({label})"))
    plots.append(figure_lads(real["lads"] * 2, out / "fig_lads.png",
                             "LADS delivery vs FIFO, Size-first, Cache-first, Tail-aware, the "
                             "TTL baselines, KV offloading and the no-eviction bound (SIMULATED "
                             "engines, virtual time)"))
    bars = {arm: [Bar(**b) for b in found] for arm, found in real["timeline"].items()}
    plots.append(plot(bars, out / "timeline_routing.png", "One Routing workflow under the "
                      "floor and the full arm: its stage calls, the fills run for it and its "
                      f"waits for them ({label})"))
    write_report("quick", real["matrix"], [], out, 1.0, plots)


def test_no_two_labels_overlap_in_any_figure_the_report_draws(
        real: dict[str, Any], drawn: dict[str, Figure], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    every_figure(real, tmp_path)
    assert set(drawn) == {"fig8_latency_vs_floor.png", "fig9_fanout_cost.png",
                          "fig10_replay_rate.png", "fig14_routing_sweep.png",
                          "fig14_decomposition.png", "fig_lads.png", "timeline_routing.png"}
    for name, fig in drawn.items():
        assert len(labels(fig, monkeypatch)) > 5, name  # the check sees the figure's texts
        assert overlaps(fig, monkeypatch) == [], name


def test_the_check_sees_overlapping_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    fig = Figure()
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.annotate("routing/c1", (0.5, 0.5))
    ax.annotate("routing/whole_request", (0.5, 0.5))
    assert overlaps(fig, monkeypatch) == [("routing/c1", "routing/whole_request")]


def legend_texts(fig: Figure) -> set[str]:
    return {t.get_text() for leg in fig.findobj(Legend) for t in leg.get_texts()}


def test_fig9_colours_arms_marks_workloads_in_a_legend_and_counts_per_workflow(
        real: dict[str, Any], drawn: dict[str, Figure], tmp_path: Path) -> None:
    write_report("quick", real["matrix"], [], tmp_path, 1.0)
    fig = drawn["fig9_fanout_cost.png"]
    fan, cost = fig.axes
    assert fan.get_xlabel() == "fills issued per workflow"  # the summary's unit
    assert "per workflow" in (tmp_path / "summary.md").read_text()
    assert not fan.texts and not cost.texts  # no point labels: the legend names them
    arms = {a for r in real["matrix"] for a in r["arms"]} - {"floor"}
    workloads = {r["workload"] + ("" if r["profile"] == "data" else "·" + r["profile"])
                 for r in real["matrix"]}
    assert arms | workloads <= legend_texts(fig)
    colours = {tuple(c.get_facecolor()[0]) for c in fan.collections}
    assert len(colours) == len(arms)  # a colour per arm, not per point


def test_every_arm_has_its_own_colour_in_every_figure() -> None:
    assert set(report_plots.ARM_COLORS) == set(ALL_ARMS)
    assert len(set(report_plots.ARM_COLORS.values())) == len(ALL_ARMS)


def test_the_timeline_draws_a_wait_for_a_fill_as_a_wait(
        real: dict[str, Any], drawn: dict[str, Figure], tmp_path: Path) -> None:
    bars = {arm: [Bar(**b) for b in found] for arm, found in real["timeline"].items()}
    waits = [b for b in bars["full"] if style_of(b) == "promoted_fill"]
    assert any(b.end_s - b.start_s > 1.0 for b in waits)  # the run has a long wait in it
    plot(bars, tmp_path / "timeline.png", "t")
    fig = drawn["timeline.png"]
    full = fig.axes[1]
    rows = [t.get_text() for t in full.get_yticklabels()]
    wait = max(waits, key=lambda b: b.end_s - b.start_s)
    patch = next(p for p in full.patches
                 if p.get_y() + p.get_height() / 2 == pytest.approx(rows.index(wait.row))
                 and p.get_x() == pytest.approx(wait.start_s))
    assert patch.get_hatch() and patch.get_facecolor()[:3] == (1.0, 1.0, 1.0)  # hollow, hatched
    engine = [p for p in full.patches if not p.get_hatch()]
    assert engine and all(p.get_facecolor()[:3] != (1.0, 1.0, 1.0) for p in engine)
    assert STYLES["promoted_fill"][0] in legend_texts(fig)
