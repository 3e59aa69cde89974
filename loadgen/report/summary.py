"""The Markdown summary of ``dynbranch report``: our table, the paper's numbers beside ours per
workload, and the measured reasons they differ (predictor coverage, fill use, library share,
the admission policy, the engine). Inputs are ``bench arms --json`` objects; nothing runs here.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadgen.arms.envelope import regret_text
from loadgen.meshes.clocks import virtual
from loadgen.report.numbers import fixed, percent, signed
from loadgen.report.plots import engine_label
from loadgen.workloads.profiles import DEFAULT_PROFILE
from loadgen.workloads.schedule import closed_loop, open_loop

#: The paper's figures (dynbranch §5.2, Tables 1–2, §2.2; ../shared/notes/paper-figures.md).
PAPER = {
    "full_low": "−46% to −66%",  # mean latency vs the floor at low load, all four workloads
    "prior_low": "−14% to −32%",  # vs the strongest prior system at low load
    "c2_serial_4gpu": {"routing": -21.9, "react": -8.5, "subagent": -34.0, "hci": -47.7},
    "c1_mix": -32.2,  # C1 alone over the Table 1 mix
    "coverage": {"react": "top-3 0.61", "hci": "top-1 0.967 (29/30)"},
}


def _load(r: dict[str, Any]) -> str:
    return f"Poisson {r.get('rate_per_s')}/s" if open_loop(r.get("arrival")) else "serial"


def seed_ids(r: dict[str, Any]) -> list[int]:
    """The seeds a cell ran (merged into its one paired sample)."""
    return list(r.get("seeds") or [r.get("seed", 0)])


def seeds_text(seeds: Sequence[int]) -> str:
    """The count and the ids: '1 (id 0)', '5 (ids 0-4)', '3 (ids 0, 2, 7)'."""
    ids = sorted(seeds)
    if len(ids) == 1:
        return f"1 (id {ids[0]})"
    if ids == list(range(ids[0], ids[-1] + 1)):
        return f"{len(ids)} (ids {ids[0]}-{ids[-1]})"
    return f"{len(ids)} (ids {', '.join(map(str, ids))})"


def _seeds(r: dict[str, Any]) -> str:
    return seeds_text(seed_ids(r))


def _table(results: Sequence[dict[str, Any]]) -> list[str]:
    lines = ["| workload | load | profile | seeds | n | arm | mean s | p95 s | ratio to floor "
             "| 95% CI | oracle share | envelope regret [95% CI] | engine-s / floor | stalls "
             "| outputs = floor |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for arm, a in r["arms"].items():
            ci = a.get("ratio_ci95")
            cost = a.get("engine_s_vs_floor")
            share = a.get("oracle_share")
            p95 = a.get("p95_s")
            lines.append(
                f"| {r['workload']} | {_load(r)} | {r.get('profile', 'data')} | {_seeds(r)} | "
                f"{a.get('n', '')} | {arm} | {a['mean_s']:.2f} | "
                f"{'' if p95 is None else f'{p95:.2f}'} | {a['ratio_to_floor']:.3f} | "
                f"{'' if not ci else f'[{ci[0]:.3f}, {ci[1]:.3f}]'} | "
                f"{'' if share is None or arm == 'floor' else fixed(share, 2)} | "
                f"{regret_text(a.get('envelope_regret'))} | "
                f"{'' if cost is None else f'{cost:.2f}'} | {a.get('stalls', 0)} | "
                f"{_equal(a.get('outputs_equal_floor'))} |")
    return lines


def envelope_section(title: str, points: Sequence[tuple[float, dict[str, Any]]],
                     worst: dict[str, dict[str, Any]]) -> list[str]:
    """A sweep's envelope regrets: per arm and point, its full/floor minus the best fixed K's
    there (paired 95% CI), and its worst case over the sweep."""
    arms = [a for a in points[0][1].get("arms", {}) if a != "floor"] if points else []
    lines = ["", f"## Envelope regret: {title}", "",
             "An arm's full/floor minus the lowest full/floor among the fixed fan-outs that ran "
             "at that point (C1 alone = K 0, fixed1, fixed = top 2, always = every candidate), "
             "with the paired 95% CI; the last column is its worst case over the sweep.", "",
             "| arm | " + " | ".join(f"{x:g} ({r.get('best_fixed_k', {}).get('arm', '—')})"
                                    for x, r in points) + " | worst |",
             "|---|" + "---|" * (len(points) + 1)]
    for arm in arms:
        cells = [regret_text(r["arms"].get(arm, {}).get("envelope_regret")) or "—"
                 for _, r in points]
        w = worst.get(arm)
        lines.append(f"| {arm} | " + " | ".join(cells) + " | "
                     + (f"{regret_text(w)} at {w['x']:g}" if w else "—") + " |")
    return lines


def _reachable(results: Sequence[dict[str, Any]]) -> list[str]:
    """Per cell: the recurrence knobs and what an oracle could reach (its full/floor)."""
    lines = ["", "## What is reachable", "",
             "The oracle bound (reuse of every exact repeat plus full overlap of every covered "
             "branch, from the floor's own trace) as a full/floor ratio: no arm can go below it "
             "on that schedule. Recurrence is a stated knob of each schedule (profile).", "",
             "| workload | load | profile | recurrence | oracle full/floor | full arm |",
             "|---|---|---|---|---|---|"]
    for r in results:
        oracle = r.get("oracle", {}).get("full_over_floor")
        full = r["arms"].get("full", {}).get("ratio_to_floor")
        knobs = ", ".join(f"{k} {v:g}" for k, v in sorted(r.get("recurrence", {}).items()))
        lines.append(f"| {r['workload']} | {_load(r)} | {r.get('profile', 'data')} | "
                     f"{knobs or '-'} | {'-' if oracle is None else f'{oracle:.3f}'} | "
                     f"{'-' if full is None else f'{full:.3f}'} |")
    return lines


def _cells(results: Sequence[dict[str, Any]], workload: str, serial: bool, low: bool = True
           ) -> list[dict[str, Any]]:
    """The workload's cells of one arrival kind (Poisson at its low-load rate, or serial), on
    the data sets' own recurrence."""
    out = []
    for r in results:
        if r["workload"] != workload or closed_loop(r.get("arrival")) != serial:
            continue
        if r.get("profile", DEFAULT_PROFILE) != DEFAULT_PROFILE:
            continue
        if not serial and low and r.get("load", "idle") not in ("low", "idle"):
            continue
        out.append(r)
    return out


def _delta(cells: Sequence[dict[str, Any]], arm: str) -> str:
    """'−31.2% [−45.0, −12.1]': mean change vs the floor over the cells, widest CI seen."""
    rows = [c["arms"][arm] for c in cells if arm in c["arms"] and not c["arms"][arm].get("failed")]
    if not rows:
        return "—"
    mean = statistics.fmean(a["ratio_to_floor"] for a in rows)
    cis = [a["ratio_ci95"] for a in rows if a.get("ratio_ci95")]
    text = percent(mean - 1, 1, sign=True)
    if cis:
        low, high = min(c[0] for c in cis), max(c[1] for c in cis)
        text += f" [{signed(100 * (low - 1), 0)}, {signed(100 * (high - 1), 0)}]"
    return text


def _paper_c2(workload: str) -> str:
    """Table 2's C2-alone change for the workload, or '—' where the paper has none."""
    value = PAPER["c2_serial_4gpu"].get(workload)
    return "—" if value is None else f"{value:+.1f}%"


def _c2_delta(low: Sequence[dict[str, Any]], serial: Sequence[dict[str, Any]]) -> str:
    """C2 alone in the serial closed loop (Table 2's setting) where one ran, else at low load,
    saying which."""
    cells, where = (serial, "serial loop") if serial else (low, "low-load Poisson")
    delta = _delta(cells, "c2")
    return delta if delta == "—" else f"{delta} ({where})"


def _vs_prior(cells: Sequence[dict[str, Any]]) -> str:
    """Full against the whole-request cache (our stand-in for the strongest prior system)."""
    pairs = [(c["arms"]["full"]["mean_s"], c["arms"]["whole_request"]["mean_s"]) for c in cells
             if "full" in c["arms"] and "whole_request" in c["arms"]]
    if not pairs:
        return "—"
    return percent(sum(f for f, _ in pairs) / sum(w for _, w in pairs) - 1, 1, sign=True)


def _why(workload: str, cells: Sequence[dict[str, Any]], top_k: int) -> str:
    """Measured reasons our full arm's figure differs from the paper's range."""
    if not cells:
        return "no low-load cell ran"
    reasons = []
    guard = cells[0].get("leak_guard") or {}
    top = guard.get("given_top123")
    if top:
        paper = PAPER["coverage"].get(workload)
        reasons.append(f"predictor top-{top_k} coverage {top[min(top_k, 3) - 1]:.2f} on the test "
                       f"split" + (f" (paper {paper})" if paper else ""))
    full = [c["arms"]["full"] for c in cells if "full" in c["arms"]]
    if full:
        issued = statistics.fmean(a.get("fills_issued", 0.0) for a in full)
        used = statistics.fmean(a.get("stages_promoted", 0.0) for a in full)
        reasons.append(f"{issued:.2f} fills issued and {used:.2f} stages promoted per workflow")
        calls = [sum(a.get("sources", {}).values()) for a in full]
        lib = [a.get("sources", {}).get("library", 0) for a in full]
        if sum(calls):
            reasons.append(f"{percent(sum(lib) / sum(calls))} of calls served by the library")
        shares = [a["oracle_share"] for a in full if a.get("oracle_share") is not None]
        if shares:
            reasons.append(f"{percent(statistics.fmean(shares))} of the oracle bound captured")
    c2 = [(c["arms"]["full"].get("fills_issued", 0.0), c["arms"]["c2"].get("fills_issued", 0.0))
          for c in cells if "full" in c["arms"] and "c2" in c["arms"]]
    if c2:
        f, x = (statistics.fmean(v) for v in zip(*c2, strict=True))
        reasons.append(f"priced admission issued {f:.2f} fills per workflow where C2-only's "
                       f"fixed top-{top_k} issued {x:.2f}")
    fixed = [(c["arms"]["full"]["ratio_to_floor"], c["arms"]["fixed"]["ratio_to_floor"])
             for c in cells if "full" in c["arms"] and "fixed" in c["arms"]]
    if fixed:
        f, x = (statistics.fmean(v) for v in zip(*fixed, strict=True))
        reasons.append(f"priced admission {f:.3f} of the floor against the fixed top-{top_k} "
                       f"policy's {x:.3f} (mean over seeds; compare the CIs above)")
    return "; ".join(reasons)


def paper_section(results: Sequence[dict[str, Any]]) -> list[str]:
    """Per workload: our changes vs the floor beside the paper's, and why they differ."""
    workloads = sorted({r["workload"] for r in results})
    top_k = results[0].get("top_k", 2) if results else 2
    lines = ["", "## Beside the paper", "",
             "Δ is the change of mean latency against the floor on the same schedule (95% CI "
             "from the paired bootstrap, widest over seeds). The paper's full-system range is "
             f"{PAPER['full_low']} at low load and {PAPER['prior_low']} against its strongest "
             "prior system; our stand-in for a prior system is the whole-request cache. Table 2 "
             "gives C2 alone in a serial closed loop on 4 GPUs (ours is measured there where a "
             "serial loop ran, else at low load, as its cell says); C1 alone was "
             f"{PAPER['c1_mix']:+.1f}% over Table 1's mix.", "",
             "| workload | full Δ (low load) | paper full | full vs whole-request cache "
             "| C1-only Δ (low load) | C2-only Δ (where measured) | paper C2 (Table 2, serial) |",
             "|---|---|---|---|---|---|---|"]
    reasons = []
    for w in workloads:
        low, serial = _cells(results, w, serial=False), _cells(results, w, serial=True)
        reasons.append(f"- **{w}**: {_why(w, low, top_k)}.")
        c2 = _c2_delta(low, serial)
        lines.append(f"| {w} | {_delta(low, 'full')} | {PAPER['full_low']} | {_vs_prior(low)} "
                     f"| {_delta(low, 'c1')} | {c2} | {_paper_c2(w)} |")
    lines += ["", "Where and why ours differ (measured in these runs):", ""]
    lines += reasons
    sizes = sorted({len(r.get("seeds") or [0]) * int(r.get("workflows", 0)) for r in results})
    lines += ["- **all**: the engine is simulated (a cost model of the preset, not a GPU), and "
              "the paper ran Qwen3-32B on 4 H200s with its own workflow traces; our schedules "
              f"are drawn from the public data sets' test split ({', '.join(map(str, sizes))} "
              "workflows per cell, seeds merged), so see the CIs before reading a difference."]
    return lines


def summary_markdown(results: Sequence[dict[str, Any]], *, matrix: str,
                     plots: Sequence[Path], run: dict[str, Any] | None = None) -> str:
    """The report's Markdown: where it came from (``run``: ``run_record``), our table, the
    paper's numbers beside it, where they differ."""
    first = results[0] if results else {}
    stalls = sum(sum(r.get("stalls", {}).values()) for r in results)
    lines = head(matrix, run)
    lines += [f"Engine: {engine_label(first)}. {clock_text(first)} Every ratio is an arm's mean "
              "over the floor's on the same schedule, paired by request id. Engine-s / floor is "
              "the arm's engine time (prefill + decode, canonical and speculative) over the "
              f"floor's. Stalls (calls over 0.25 simulated s outside the engine; a stalled "
              f"workflow fails and is left out): {stalls} in all. Profiles: "
              f"{', '.join(sorted({r.get('profile', 'data') for r in results}))}.", ""]
    lines += _table(results)
    lines += _reachable(results)
    lines += paper_section(results)
    lines += ["", "## Plots", ""]
    lines += [f"![{p.stem}]({p.name})" for p in plots]
    return "\n".join(lines) + "\n"


def clock_text(result: dict[str, Any]) -> str:
    """Which clock the latencies were measured in (what the result records, nothing more)."""
    clock, scale = result.get("clock"), result.get("time_scale")
    if virtual(clock):
        hop = result.get("hop_s") or 0.0
        return ("Latency in simulated seconds on the virtual clock: simulated engine time, "
                f"waits and {hop * 1000:g} ms per cross-service call (a loopback grpc.aio round "
                "trip); the mesh's own CPU time is in no latency (time scale: not applicable).")
    if not result.get("simulated", True):
        return "Latency in wall seconds on a real engine."
    if clock is None:
        return "Latency in simulated seconds (the result does not record its clock)."
    if scale is None:
        return f"Latency in simulated seconds on the {clock} mesh (its time scale not recorded)."
    return (f"Latency in simulated seconds on the {clock} mesh at time scale {scale:g} (wall "
            "seconds / time scale: the mesh's own CPU time is inflated by 1 / time scale).")


def clock_name(result: dict[str, Any]) -> str:
    """'virtual clock, 0.5 ms per hop', 'live clock, time scale 0.5', or 'clock not
    recorded'."""
    clock, scale = result.get("clock"), result.get("time_scale")
    if virtual(clock):
        return f"virtual clock, {(result.get('hop_s') or 0.0) * 1000:g} ms per hop"
    if clock is None:
        return "clock not recorded"
    return f"{clock} clock" + ("" if scale is None else f", time scale {scale:g}")


def cell_record(label: str, result: dict[str, Any]) -> dict[str, Any]:
    """What one ``bench arms`` cell of the report ran: its clock, profile, seeds (count and
    ids) and workflows (per seed, and in all)."""
    seeds = seed_ids(result)
    per_seed = result.get("workflows")
    return {"cell": label, "workload": result.get("workload"),
            "profile": result.get("profile", DEFAULT_PROFILE), "load": _load(result),
            "engine": engine_label(result), "clock": clock_name(result),
            "seeds": {"count": len(seeds), "ids": seeds}, "workflows_per_seed": per_seed,
            "workflows": None if per_seed is None else per_seed * len(seeds)}


def head(matrix: str, run: dict[str, Any] | None) -> list[str]:
    """The title, and with ``run`` the commit, the date and every cell's clock, profile, seeds
    and workflows."""
    lines = [f"# dynbranch report ({matrix})", ""]
    if run is None:
        return lines
    failed = run["failures"]
    lines += [f"Commit `{run['commit']}`; started {run['date']} (UTC); took {run['wall_s']} s; "
              f"{len(run['cells'])} cells ran"
              + (f", {failed} failures listed at the end." if failed else ", none failed."), ""]
    if not run["cells"]:
        return lines + ["No cell completed: nothing below but the failures.", ""]
    lines += ["## What ran", "",
              "Each cell is one `bench arms` run: its arms on the same schedules, its seeds "
              "merged into one paired sample.", "",
              "| cell | workload | profile | load | engine | clock | seeds (count, ids) "
              "| workflows (per seed × seeds) |", "|---|---|---|---|---|---|---|---|"]
    for c in run["cells"]:
        seeds, per_seed = c["seeds"], c["workflows_per_seed"]
        workflows = ("not recorded" if per_seed is None
                     else f"{per_seed} × {seeds['count']} = {c['workflows']}")
        lines.append(f"| {c['cell']} | {c['workload']} | {c['profile']} | {c['load']} "
                     f"| {c['engine']} | {c['clock']} | {seeds_text(seeds['ids'])} "
                     f"| {workflows} |")
    return lines + [""]


def _equal(flag: bool | None) -> str:
    """'yes', 'NO', or '(reference)' for the floor itself."""
    return "(reference)" if flag is None else ("yes" if flag else "NO")


__all__ = ["PAPER", "cell_record", "clock_name", "clock_text", "envelope_section", "head",
           "paper_section", "seeds_text", "summary_markdown"]
