"""Plots and the Markdown summary of ``dynbranch report`` (matplotlib, headless).

Every figure names the engine preset and says whether the engine was simulated. Colours mean one
thing throughout: an arm has one colour in every figure (``ARM_COLORS``), and each figure has a
legend for what its colours and markers stand for; no two text labels overlap (the figure tests
render each one and compare every label's box). Units are the summary's: latency ratios to the
floor, fills per workflow, engine-seconds over the floor's, simulated seconds. Inputs are the
JSON objects ``dynbranch bench arms --json`` prints (one per workload, load and seed); nothing
here runs a workload.
"""

from __future__ import annotations

import statistics
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import NullFormatter  # noqa: E402

from loadgen.arms.specs import ALL_ARMS  # noqa: E402

#: One colour per arm, the same in every figure (in ``ALL_ARMS`` order; the floor, the
#: reference, is grey).
ARM_COLORS: dict[str, str] = dict(zip(ALL_ARMS, (
    "tab:gray", "tab:blue", "tab:orange", "tab:green", "tab:olive", "tab:purple", "tab:pink",
    "tab:brown", "tab:cyan", "darkkhaki", "black", "tab:red"), strict=True))
#: Markers of the workloads (and their paper-profile groups) in a scatter, in sorted order.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")


def arm_color(arm: str) -> str:
    """The arm's colour (an unknown arm is grey)."""
    return ARM_COLORS.get(arm, "tab:gray")


def engine_label(result: dict[str, Any]) -> str:
    """'2 × qwen3-32b-h200, SIMULATED engine' (or 'real'; what the result records only)."""
    kind = "SIMULATED engine" if result.get("simulated", True) else "real engine"
    engines, preset = result.get("engines"), result.get("preset")
    if engines is None or preset is None:
        return kind if preset is None else f"{preset}, {kind}"
    return f"{engines} × {preset}, {kind}"


def _arm_ratios(results: Sequence[dict[str, Any]], workload: str, arm: str
                ) -> tuple[float, float, float] | None:
    """Mean ratio to the floor over seeds, and the widest CI bounds seen (or the seed spread)."""
    rows = [r["arms"][arm] for r in results if r["workload"] == workload and arm in r["arms"]]
    rows = [a for a in rows if not a.get("failed")]
    if not rows:
        return None
    mean = statistics.fmean(a["ratio_to_floor"] for a in rows)
    cis = [a["ratio_ci95"] for a in rows if a.get("ratio_ci95")]
    if cis:
        return mean, min(c[0] for c in cis), max(c[1] for c in cis)
    return mean, min(a["ratio_to_floor"] for a in rows), max(a["ratio_to_floor"] for a in rows)


def figure8(results: Sequence[dict[str, Any]], path: Path, title: str) -> Path:
    """Grouped bars: mean latency normalized to the floor per workload and arm, with 95% CIs."""
    workloads = sorted({r["workload"] for r in results})
    arms = [a for a in arm_order(results) if a != "floor"]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(workloads) + 2), 3.6))
    width = 0.8 / max(len(arms), 1)
    for i, arm in enumerate(arms):
        xs, ys, lo, hi = [], [], [], []
        for j, w in enumerate(workloads):
            got = _arm_ratios(results, w, arm)
            if got is None:
                continue
            xs.append(j + (i - (len(arms) - 1) / 2) * width)
            ys.append(got[0])
            lo.append(max(got[0] - got[1], 0.0))
            hi.append(max(got[2] - got[0], 0.0))
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=arm, color=arm_color(arm))
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--", label="floor (1.0)")
    ax.set_xticks(range(len(workloads)), workloads)
    ax.set_ylabel("mean latency / floor")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, title="arm", title_fontsize=7, loc="upper left",
              bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


def figure9(results: Sequence[dict[str, Any]], path: Path, title: str) -> Path:
    """After Figure 9: each arm's latency ratio against its fan-out (fills issued per workflow,
    left) and against its engine-seconds over the floor's (right: 1.0 is the floor's work; what
    is above it is speculative work that was not used in its place). One point per arm and cell:
    its colour is the arm, its marker the workload (legends on the right; no point labels)."""
    fig, (fan, cost) = plt.subplots(1, 2, figsize=(10.0, 3.8), sharey=True)
    groups = sorted({r["workload"] for r in results})
    marker = {g: MARKERS[i % len(MARKERS)] for i, g in enumerate(groups)}
    arms: list[str] = []
    for r in results:
        for arm, a in r["arms"].items():
            if arm == "floor" or a.get("failed") or a.get("ratio_to_floor") is None:
                continue
            arms += [arm] if arm not in arms else []
            style = {"s": 26, "color": arm_color(arm), "marker": marker[r["workload"]],
                     "alpha": 0.85, "edgecolors": "none"}
            fan.scatter(a.get("fills_issued", 0.0), a["ratio_to_floor"], **style)
            if a.get("engine_s_vs_floor") is not None:
                cost.scatter(a["engine_s_vs_floor"], a["ratio_to_floor"], **style)
    for ax in (fan, cost):
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.grid(alpha=0.3)
    cost.axvline(1.0, color="black", linewidth=0.8, linestyle=":")
    fan.set_xlabel("fills issued per workflow")
    fan.set_ylabel("mean latency / floor")
    cost.set_xlabel("engine-seconds / floor's (canonical + speculative)")
    # one legend, two columns: the arms' colours, then the workloads' markers
    rows = max(len(arms), len(groups))
    blank = Line2D([], [], linestyle="", label="")
    colours = [Line2D([], [], linestyle="", marker="o", color=arm_color(a), label=a)
               for a in arms]
    markers = [Line2D([], [], linestyle="", marker=marker[g], color="dimgray", label=g)
               for g in groups]
    cost.legend(handles=[*colours, *[blank] * (rows - len(arms)),
                         *markers, *[blank] * (rows - len(groups))],
                ncols=2, title="arm (colour), workload (marker)", fontsize=7, title_fontsize=7,
                loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle(title, fontsize=9)
    return _save(fig, path)


def figure10(sweep: Sequence[tuple[float, dict[str, Any]]], path: Path, title: str) -> Path:
    """Speedup (floor mean / full mean) against the exact-replay rate (after Figure 10)."""
    rates = [rate for rate, _ in sweep]
    speedups, lo, hi = [], [], []
    for _, result in sweep:
        full = result["arms"]["full"]
        speedups.append(1.0 / full["ratio_to_floor"])
        ci = full.get("ratio_ci95")
        lo.append(speedups[-1] - (1.0 / ci[1] if ci else speedups[-1]))
        hi.append((1.0 / ci[0] if ci else speedups[-1]) - speedups[-1])
    fig, ax = plt.subplots(figsize=(4.8, 3.4))
    ax.errorbar(rates, speedups, yerr=[lo, hi], marker="o", capsize=3, color=arm_color("full"))
    ax.set_xlabel("exact-replay rate")
    ax.set_ylabel("full arm's speedup over the floor (×)")
    ax.set_title(title, fontsize=9)
    return _save(fig, path)


def figure14(by_rate: Sequence[tuple[float, dict[str, Any]]], path: Path, title: str) -> Path:
    """Latency decomposition across λ: what C1 removes from the floor, what C2 adds on top,
    and what is left (after Figure 14)."""
    rates = [f"{rate:g}/s" for rate, _ in by_rate]
    left, c1_cut, c2_cut = [], [], []
    for _, result in by_rate:
        arms = result["arms"]
        floor, c1, full = (arms[a]["mean_s"] for a in ("floor", "c1", "full"))
        left.append(full)
        c2_cut.append(max(c1 - full, 0.0))
        c1_cut.append(max(floor - c1, 0.0))
    fig, ax = plt.subplots(figsize=(5.0, 3.4))
    ax.bar(rates, left, label="full (what is left)", color=arm_color("full"))
    ax.bar(rates, c2_cut, bottom=left, label="removed by C2 on top of C1", color=arm_color("c2"))
    ax.bar(rates, c1_cut, bottom=[a + b for a, b in zip(left, c2_cut, strict=True)],
           label="removed by C1", color=arm_color("c1"))
    ax.set_xlabel("arrival rate λ")
    ax.set_ylabel("mean latency, simulated s")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    return _save(fig, path)


#: The sweep figure's arms, in the legend's order.
SWEEP_ARMS = ("c1", "fixed1", "fixed", "always", "load_threshold", "full")


def figure_sweep(cells: Sequence[tuple[float, dict[str, Any]]], path: Path, title: str) -> Path:
    """Fig. 14's shape with the fixed fan-outs: full/floor against λ per arm with its 95% CI,
    the envelope (best fixed K per λ) dashed; fills issued per workflow on the right."""
    rates = [x for x, _ in cells]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10.0, 3.6))
    for arm in SWEEP_ARMS:
        rows = [(x, r["arms"][arm]) for x, r in cells if arm in r["arms"]]
        if not rows:
            continue
        xs = [x for x, _ in rows]
        ys = [a["ratio_to_floor"] for _, a in rows]
        lo = [max(y - (a.get("ratio_ci95") or (y, y))[0], 0.0) for y, (_, a) in zip(ys, rows,
                                                                              strict=True)]
        hi = [max((a.get("ratio_ci95") or (y, y))[1] - y, 0.0) for y, (_, a) in zip(ys, rows,
                                                                              strict=True)]
        style = {"linewidth": 2.2 if arm == "full" else 1.0, "color": arm_color(arm)}
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", markersize=3, capsize=2,
                    label="priced (full)" if arm == "full" else arm, **style)
        bx.plot(xs, [a["fills_issued"] for _, a in rows], marker="o", markersize=3,
                label=arm, **style)
    envelope = [(x, b["ratio_to_floor"]) for x, r in cells if (b := r.get("best_fixed_k"))]
    if envelope:
        ax.plot([x for x, _ in envelope], [y for _, y in envelope], "k--", linewidth=1,
                label="envelope (best fixed K)")
    for axis in (ax, bx):
        axis.set_xscale("log")
        axis.set_xticks(rates, [f"{x:g}" for x in rates])
        axis.xaxis.set_minor_formatter(NullFormatter())  # the rates alone, not 3, 4, 6 beside
        axis.set_xlabel("arrival rate λ (workflows/s)")
    ax.set_ylabel("mean latency / floor")
    bx.set_ylabel("fills issued per workflow")
    ax.set_title(title, fontsize=9)
    bx.set_title("fills issued per workflow, per arm", fontsize=9)
    bx.legend(fontsize=7, title="arm", title_fontsize=7, loc="upper left",
              bbox_to_anchor=(1.02, 1.0),
              handles=[*ax.get_legend_handles_labels()[0]],
              labels=[*ax.get_legend_handles_labels()[1]])
    return _save(fig, path)


#: The LADS figure's arms, left to right (the sweep appears as its best TTL).
LADS_ARMS = ("fifo", "size_first", "cache_first", "tail_aware", "ttl_simple", "ttl_continuum",
             "ttl_best", "lads_no_turnover", "lads", "lads_program_fcfs", "lads_unbudgeted",
             "fifo_offload",
             "lads_offload", "no_eviction_bound")


def figure_lads(blocks: Sequence[dict[str, Any]], path: Path, title: str) -> Path:
    """One row per workload and preset: mean complete-workflow latency per arm with its 95%
    t-interval over seeds, and the protection block-seconds it spent."""
    fig, axes = plt.subplots(len(blocks), 2, figsize=(13, 3.1 * len(blocks)), squeeze=False)
    for row, block in zip(axes, blocks, strict=True):
        arms = [a for a in LADS_ARMS if a in block["policies"]]
        ps = [block["policies"][a] for a in arms]
        means = [p["mean_s"] for p in ps]
        lo = [max(m - (p["mean_ci95"] or (m, m))[0], 0.0) for m, p in zip(means, ps, strict=True)]
        hi = [max((p["mean_ci95"] or (m, m))[1] - m, 0.0) for m, p in zip(means, ps, strict=True)]
        labels = [f"ttl_best ({p['ttl_s']:g} s)" if a == "ttl_best" else a
                  for a, p in zip(arms, ps, strict=True)]
        colors = [LADS_FAMILIES[_lads_family(a)][1] for a in arms]
        ax = row[0]
        ax.bar(range(len(arms)), means, yerr=[lo, hi], capsize=2, color=colors)
        for x, (m, h, p) in enumerate(zip(means, hi, ps, strict=True)):
            ax.text(x, m + h, f"{p['ratio_to_fifo']:.2f}", ha="center", va="bottom",
                    fontsize=6)
        ax.margins(y=0.12)  # room for the ratios above the tallest bar
        ax.set_xticks(range(len(arms)), labels, rotation=90, fontsize=7)
        ax.set_ylabel("mean latency (simulated s)")
        ax.set_title(f"{block['workload']} on {block['preset']}, seeds {block['seeds']} "
                     "(× FIFO above the bars)", fontsize=8)
        ax = row[1]
        ax.bar(range(len(arms)), [p["protection_block_s"] for p in ps], color=colors)
        ax.set_xticks(range(len(arms)), labels, rotation=90, fontsize=7)
        ax.set_ylabel("protection block-seconds")
        ax.set_title("blocks held by leases or pins, integrated over the run", fontsize=8)
        families = dict.fromkeys(_lads_family(a) for a in arms)
        ax.legend(handles=[Patch(color=LADS_FAMILIES[f][1], label=LADS_FAMILIES[f][0])
                           for f in families], fontsize=7, loc="upper left",
                  bbox_to_anchor=(1.02, 1.0))
    fig.suptitle(title, fontsize=9)
    return _save(fig, path)


#: The LADS figure's colour families: (legend text, colour).
LADS_FAMILIES = {
    "queue": ("queue orders (FIFO, Size-first, Cache-first, Tail-aware)", "tab:blue"),
    "ttl_baselines": ("TTL baselines (Continuum, the sweep's best)", "tab:orange"),
    "lads_variants": ("LADS and its variants", "tab:green"),
    "reference": ("references (FIFO + KV offloading, no-eviction bound)", "tab:gray")}


def _lads_family(arm: str) -> str:
    if arm.startswith("lads"):
        return "lads_variants"
    if arm in ("fifo_offload", "no_eviction_bound"):
        return "reference"
    return "ttl_baselines" if arm.startswith("ttl") else "queue"


def arm_order(results: Sequence[dict[str, Any]]) -> list[str]:
    """Arm names in the order the results first list them."""
    seen: list[str] = []
    for r in results:
        for arm in r.get("arms", {}):
            if arm not in seen:
                seen.append(arm)
    return seen


def _wrap(text: str, width_in: float, fontsize: float) -> str:
    """``text`` wrapped to lines that fit ``width_in`` inches at ``fontsize`` points (a
    character is about 0.55 em wide)."""
    return textwrap.fill(text, max(20, int(width_in * 72 / (0.55 * fontsize))))


def _save(fig: Any, path: Path) -> Path:
    width = fig.get_figwidth()
    for ax in fig.axes:  # long titles name the preset and the engine: wrap, never clip
        share = ax.get_position().width
        ax.set_title(_wrap(ax.get_title().replace("\n", " "), width * share, 8), fontsize=8)
    if fig.get_suptitle():
        fig.suptitle(_wrap(fig.get_suptitle().replace("\n", " "), width * 0.95, 9), fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


__all__ = ["ARM_COLORS", "arm_color", "arm_order", "engine_label", "figure8", "figure9",
           "figure10", "figure14", "figure_lads", "figure_sweep"]
