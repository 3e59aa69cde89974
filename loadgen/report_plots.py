"""Plots and the Markdown summary of ``dynbranch report`` (matplotlib, headless).

Every figure names the engine preset and says whether the engine was simulated. Inputs are the
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


def engine_label(result: dict[str, Any]) -> str:
    """'2 × qwen3-32b-h200, SIMULATED engine' (or 'real')."""
    kind = "SIMULATED engine" if result.get("simulated", True) else "real engine"
    return f"{result.get('engines', '?')} × {result.get('preset', '?')}, {kind}"


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
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=arm)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(workloads)), workloads)
    ax.set_ylabel("mean latency / floor")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, ncols=min(len(arms), 4))
    return _save(fig, path)


def figure9(results: Sequence[dict[str, Any]], path: Path, title: str) -> Path:
    """After Figure 9: each arm's latency ratio against its fan-out (fills issued per request,
    left) and against its engine-seconds over the floor's (right: 1.0 is the floor's work; what
    is above it is speculative work that was not used in its place). One point per arm and cell."""
    fig, (fan, cost) = plt.subplots(1, 2, figsize=(9.0, 3.6), sharey=True)
    for r in results:
        for arm, a in r["arms"].items():
            if arm == "floor" or a.get("failed") or a.get("ratio_to_floor") is None:
                continue
            label = f"{r['workload']}/{arm}"
            fan.scatter(a.get("fills_issued", 0.0), a["ratio_to_floor"], s=14)
            fan.annotate(label, (a.get("fills_issued", 0.0), a["ratio_to_floor"]), fontsize=6)
            if a.get("engine_s_vs_floor") is not None:
                cost.scatter(a["engine_s_vs_floor"], a["ratio_to_floor"], s=14)
                cost.annotate(label, (a["engine_s_vs_floor"], a["ratio_to_floor"]), fontsize=6)
    fan.set_xlabel("fills issued per request")
    fan.set_ylabel("mean latency / floor")
    cost.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
    cost.set_xlabel("engine-seconds / floor's (canonical + speculative)")
    fig.suptitle(textwrap.fill(title, 90), fontsize=8)
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
    ax.errorbar(rates, speedups, yerr=[lo, hi], marker="o", capsize=3)
    ax.set_xlabel("exact-replay rate")
    ax.set_ylabel("speedup over the floor (×)")
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
    ax.bar(rates, left, label="full (what is left)")
    ax.bar(rates, c2_cut, bottom=left, label="removed by C2 on top of C1")
    ax.bar(rates, c1_cut, bottom=[a + b for a, b in zip(left, c2_cut, strict=True)],
           label="removed by C1")
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
        style = {"linewidth": 2.2} if arm == "full" else {"linewidth": 1.0}
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
        axis.set_xlabel("arrival rate λ (workflows/s)")
    ax.set_ylabel("mean latency / floor")
    bx.set_ylabel("fills issued per workflow")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
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
        colors = ["tab:green" if a.startswith("lads") else "tab:gray" if a in (
            "fifo_offload", "no_eviction_bound") else "tab:orange" if a.startswith("ttl")
            else "tab:blue" for a in arms]
        ax = row[0]
        ax.bar(range(len(arms)), means, yerr=[lo, hi], capsize=2, color=colors)
        for x, p in enumerate(ps):
            ax.text(x, p["mean_s"], f"{p['ratio_to_fifo']:.2f}", ha="center", va="bottom",
                    fontsize=6)
        ax.set_xticks(range(len(arms)), labels, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("mean latency (s)")
        ax.set_title(f"{block['workload']} on {block['preset']}, seeds {block['seeds']} "
                     "(× FIFO above the bars)", fontsize=8)
        ax = row[1]
        ax.bar(range(len(arms)), [p["protection_block_s"] for p in ps], color=colors)
        ax.set_xticks(range(len(arms)), labels, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("protection block-seconds")
        ax.set_title("blocks held by leases or pins, integrated over the run", fontsize=8)
    fig.suptitle(title, fontsize=9)
    return _save(fig, path)


def arm_order(results: Sequence[dict[str, Any]]) -> list[str]:
    """Arm names in the order the results first list them."""
    seen: list[str] = []
    for r in results:
        for arm in r.get("arms", {}):
            if arm not in seen:
                seen.append(arm)
    return seen


def _save(fig: Any, path: Path) -> Path:
    for ax in fig.axes:  # long titles name the preset and the engine: wrap, never clip
        ax.set_title(textwrap.fill(ax.get_title(), 70), fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


__all__ = ["arm_order", "engine_label", "figure8", "figure9", "figure10", "figure14"]
