"""Per-arm figures of a paired run: means over workflows that completed in every arm, ratios to
the floor with paired-bootstrap CIs (clustered by seed where several ran), supported quantiles,
fill counters, adoptions, value equivalence, the share of the oracle bound each arm realizes and
its regret against the lower envelope of the fixed fan-outs (``loadgen.arms.envelope``)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from loadgen.arms.envelope import best_fixed_k, envelope_regret
from loadgen.arms.equivalence import compare_outputs
from loadgen.arms.oracle import OracleBound, oracle_share
from loadgen.arms.runner import ArmResult
from loadgen.arms.specs import ADMISSION_ARMS, FIXED_K, PRICED_ARMS
from loadgen.arms.stats import (
    min_samples,
    paired_bootstrap_ci,
    paired_difference_ci,
    quantile,
    ratio_of_means,
    supported_quantiles,
)
from services.gateway import REFUSALS

FILL_KEYS = ("fills_issued", "fills_consumed", "stages_promoted", "fills_discarded")
#: Why a demand that found its fill still running did not get it (``adoption``'s rule): it ran
#: the stage anew, or its deadline passed first.
GAVE_UP = ("stalled", "sooner", "deadline")
#: Quantiles of the fills' remaining times, where the sample supports them.
REMAINING_QUANTILES = {"p50_s": 0.5, "p90_s": 0.9}


def completed_everywhere(arms: dict[str, ArmResult]) -> list[str]:
    """Workflow ids, in the floor's order, that no arm failed (the paired sample)."""
    failed = {r.workflow_id for a in arms.values() for r in a.results if r.error}
    present = [{r.workflow_id for r in a.results} for a in arms.values()]
    first = next(iter(arms.values()))
    return [r.workflow_id for r in first.results
            if r.workflow_id not in failed and all(r.workflow_id in p for p in present)]


def _sources(arm: ArmResult) -> dict[str, int]:
    sources: dict[str, int] = {}
    for r in arm.results:
        for source, count in r.sources().items():
            sources[source] = sources.get(source, 0) + count
    return dict(sorted(sources.items()))


def _engine_calls(arm: ArmResult) -> dict[str, Any]:
    """The calls an engine answered itself (source ``engine``), as that engine reported them:
    how many, their mean time outside the engine (the mesh's overhead per call: gateway, hops,
    harness), prompt, cached and completion tokens, and decode seconds per token after the
    first (TPOT: what co-resident fills inflate). Simulated seconds on ``sim``, wall on a real
    engine. Empty where no engine reported usage (a process mesh's counters only)."""
    calls = [s for r in arm.results if not r.error for s in r.stages
             if s.source == "engine" and s.completion_tokens > 0]
    if not calls:
        return {}
    decoding = [s for s in calls if s.completion_tokens > 1]
    n = len(calls)
    return {"calls": n,
            "outside_ms": round(1000 * sum(s.outside_s for s in calls) / n, 3),
            "prompt_tokens": round(sum(s.prompt_tokens for s in calls) / n, 1),
            "cached_tokens": round(sum(s.cached_tokens for s in calls) / n, 1),
            "completion_tokens": round(sum(s.completion_tokens for s in calls) / n, 1),
            "tpot_ms": round(1000 * sum(s.decode_s for s in decoding)
                             / sum(s.completion_tokens - 1 for s in decoding), 3)
            if decoding else None}


def _engine_seconds(arm: ArmResult, floor: ArmResult, n: int) -> dict[str, Any]:
    """Engine seconds (prefill + decode, simulated seconds on ``sim``) per workflow: canonical,
    speculative (fills), and the arm's total over the floor's (Figure 9's cost axis). A fill
    cancelled mid-generation is not counted, so the speculative figure is a lower bound."""
    canonical = arm.counters.get("canonical_engine_ms", 0) / 1000
    fill = arm.counters.get("fill_engine_ms", 0) / 1000
    base = floor.counters.get("canonical_engine_ms", 0) / 1000
    return {"canonical_engine_s": round(canonical / n, 3), "fill_engine_s": round(fill / n, 3),
            "engine_s_vs_floor": round((canonical + fill) / base, 3) if base > 0 else None}


def _promotions(arm: ArmResult) -> dict[str, Any]:
    """What became of the branches whose winner was admitted and filled: promoted, or not and
    why (``REFUSALS``; "unseen": its first stage was answered where this gateway could not
    see; "unaccounted": resolved but no first-stage demand reached a promotion decision yet)."""
    c = arm.counters
    admitted, promoted = c.get("winners_admitted", 0), c.get("winners_promoted", 0)
    lost = {why: c.get(f"winners_lost_{why}", 0) for why in (*REFUSALS, "unseen")}
    lost["unaccounted"] = admitted - promoted - sum(lost.values())
    return {"winners_admitted": admitted, "winners_promoted": promoted,
            "winners_not_promoted": admitted - promoted,
            "not_promoted_why": {k: v for k, v in lost.items() if v},
            "ambiguous": c.get("ambiguous", 0),
            "promotion_refused": {why: c[f"promotion_refused_{why}"] for why in REFUSALS
                                  if c.get(f"promotion_refused_{why}", 0)},
            "joined": c.get("joined", 0)}


def _remaining(values: list[float] | None) -> dict[str, Any] | None:
    """The distribution of the fills' remaining times (None where the gateway was not seen)."""
    if values is None:
        return None
    n = len(values)
    return {"n": n, "share_positive": round(sum(v > 0 for v in values) / n, 3) if n else None,
            **{k: round(quantile(values, q), 3) if n >= min_samples(q) else None
               for k, q in REMAINING_QUANTILES.items()},
            "max_s": round(max(values), 3) if n else None}


def _adoption(arm: ArmResult) -> dict[str, Any]:
    """How far fills outlasted their windows, and what their demands did.

    ``remaining_s``: per promoted fill step, how long it still ran when its demand arrived
    (simulated s; 0 when it had ended). ``adoptions``: demands that found their fill still
    running and adopted it; ``adoptions_served``: those it answered. ``wait_timeout``: those it
    did not, by reason: stalled and sooner (the gateway gave up on the fill and ran the stage
    anew), deadline (the deadline passed first), and fill_failed: the demand waited on its
    fill, then ran anew for none of those reasons (its calls answered by an engine after a wait
    on engine work, less stalled and sooner: the fill ended without a shadow, or rarely the
    library refused it). ``library_after_wait``: calls the library answered after such a wait
    (a confirmed entry took the name while the fill ran)."""
    c = arm.counters
    gave_up = {why: c.get(f"promotion_refused_{why}", 0) for why in GAVE_UP}
    waited = [s.source for r in arm.results for s in r.stages if s.waited_s > 0]
    anew = sum(1 for source in waited if source == "engine")
    return {"remaining_s": _remaining(arm.remaining_s), "adoptions": c.get("adoptions", 0),
            "adoptions_served": c.get("adoptions_served", 0),
            "wait_timeout": {**gave_up, "fill_failed": max(
                0, anew - gave_up["stalled"] - gave_up["sooner"])},
            "library_after_wait": sum(1 for source in waited if source == "library")}


def _filled_slower(arm: ArmResult, floor: ArmResult, ids: list[str]) -> dict[str, Any]:
    """Paired workflows in which a stage was served from a fill or waited on one (its winner
    was filled), and those of them slower than on the floor: early fill must never cost a
    workflow it acted on time (``worst_s``: the largest excess, simulated s)."""
    mine = {r.workflow_id: r for r in arm.results}
    base = {r.workflow_id: r.measured_s for r in floor.results}
    filled = [i for i in ids if any(s.source == "promoted_fill" or s.waited_s > 0
                                    for s in mine[i].stages)]
    excess = [mine[i].measured_s - base[i] for i in filled if mine[i].measured_s > base[i]]
    return {"workflows": len(filled), "slower": len(excess),
            "worst_s": round(max(excess), 3) if excess else None}


def _arm(arm: ArmResult, floor: ArmResult, ids: list[str], seed: int,
         bound: OracleBound | None, clusters: Sequence[Hashable] | None) -> dict[str, Any]:
    by_id = {r.workflow_id: r.measured_s for r in arm.results}
    base_by_id = {r.workflow_id: r.measured_s for r in floor.results}
    values, base = [by_id[i] for i in ids], [base_by_id[i] for i in ids]
    ratio = ratio_of_means(values, base)
    quantiles, note = supported_quantiles(values)
    n = max(len(arm.results), 1)
    mismatched = compare_outputs(arm.results, floor.results)
    return {
        "n": len(values),
        "mean_s": round(sum(values) / len(values), 3) if values else None,
        "p50_s": quantiles["p50"], "p95_s": quantiles["p95"], "p99_s": quantiles["p99"],
        "quantile_note": note,
        "ratio_to_floor": round(ratio, 3) if ratio is not None else None,
        "ratio_ci95": list(paired_bootstrap_ci(values, base, seed=seed, clusters=clusters)
                           or ()) or None,
        "oracle_share": oracle_share(sum(base) - sum(values), bound) if bound else None,
        **{k: round(arm.counters.get(k, 0) / n, 3) for k in FILL_KEYS},
        "branches_opened": arm.counters.get("opened", 0),
        "promotions": _promotions(arm),
        "adoption": _adoption(arm),
        "filled_slower_than_floor": _filled_slower(arm, floor, ids),
        **_engine_seconds(arm, floor, n),
        "engine_calls": _engine_calls(arm),
        "sources": _sources(arm), "cache_hits": arm.cache_hits,
        "failed": sum(1 for r in arm.results if r.error),
        "stalls": sum(r.stalls() for r in arm.results),
        "errors": sum(1 for r in arm.results if r.error),
        "outputs_equal_floor": None if arm is floor else not mismatched,
        "mismatches": [f"{m.workflow_id}: {m.reason}" for m in mismatched][:10],
        **({"admission": arm.admission} if arm.admission else {}),
        **({"engine_load": arm.engine_load} if arm.engine_load else {}),
    }


def marginal_fill_cost_s(arms: dict[str, ArmResult], ids: list[str]) -> float | None:
    """What one more fill per branch costs canonical work, measured side by side: top-2 against
    top-1 (``fixed`` against ``fixed1``). The latency the second fill adds, plus what its own
    consumptions saved (each worth the mean saving of a consumed fill under top-1 over C1-only),
    per extra fill. None without the three arms or without extra fills."""
    if not {"fixed", "fixed1", "c1"} <= set(arms):
        return None
    def total(name: str) -> float:
        return sum(r.measured_s for r in arms[name].results if r.workflow_id in ids)
    c = {n: arms[n].counters for n in ("fixed", "fixed1")}
    extra = c["fixed"].get("fills_issued", 0) - c["fixed1"].get("fills_issued", 0)
    consumed1 = c["fixed1"].get("fills_consumed", 0)
    if extra <= 0 or consumed1 <= 0:
        return None
    per_consumed = (total("c1") - total("fixed1")) / consumed1
    more = c["fixed"].get("fills_consumed", 0) - consumed1
    return round((total("fixed") - total("fixed1") + more * per_consumed) / extra, 3)


def summarize(arms: dict[str, ArmResult], *, seed: int = 0, bound: OracleBound | None = None,
              seed_of: Mapping[str, Hashable] | None = None) -> dict[str, dict[str, Any]]:
    """Per arm figures; the floor is the reference (its ``outputs_equal_floor`` is None).
    ``seed_of`` (workflow id → its seed) clusters every CI by seed where several ran. Every arm
    but the floor gets its ``envelope_regret`` against the best fixed K that ran."""
    floor = arms["floor"]
    ids = completed_everywhere(arms)
    clusters = [seed_of[i] for i in ids] if seed_of is not None else None
    out = {name: _arm(arm, floor, ids, seed, bound, clusters) for name, arm in arms.items()}

    def values(name: str) -> list[float]:
        by_id = {r.workflow_id: r.measured_s for r in arms[name].results}
        return [by_id[i] for i in ids]
    base = values("floor")
    best = best_fixed_k(out)
    if best is not None:
        against = values(best["arm"])
        for name in arms:
            if name != "floor":
                out[name]["envelope_regret"] = envelope_regret(
                    values(name), against, base, seed=seed, clusters=clusters)
    for priced in PRICED_ARMS:  # against every fixed K and other policy, paired per workflow
        if priced in arms:
            out[priced]["vs_baselines"] = {
                name: dict(zip(("diff", "low", "high"), d, strict=True))
                for name in arms if (name in ADMISSION_ARMS or name in FIXED_K)
                and name not in PRICED_ARMS
                and (d := paired_difference_ci(values(priced), values(name), base, seed=seed,
                                               clusters=clusters))}
    return out


__all__ = ["completed_everywhere", "marginal_fill_cost_s", "summarize"]
