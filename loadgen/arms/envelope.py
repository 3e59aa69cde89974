"""The lower envelope of the fixed fan-outs in a cell, and each arm's regret against it.

A fixed-K arm admits the top K candidates at every branch (``specs.FIXED_K``): K = 0 is C1
alone (``c1``), then ``fixed1``, ``fixed`` (top 2), ``fixed3`` and ``always`` (every candidate).
In a cell (one workload, load and set of schedules) the envelope is the lowest full/floor among
those that ran: the fixed K an operator would have chosen in hindsight, which no online policy
knows in advance (issue 37; the shape of the paper's Fig. 14). An arm's **envelope regret** is
its full/floor minus the envelope's, with the paired CI of that difference
(``stats.paired_difference_ci``: the same workflows under both arms and the floor, clustered by
seed). A share of the oracle bound is a linear function of the arm's own latency, so it only
restates "fastest"; the regret is measured against other arms on the same schedules, and comes
out positive wherever some fixed K did better. The envelope is the best of several point
estimates, so it is biased low by that choice: a regret errs against the arm it judges. Over a
sweep (one cell per load), an arm's worst case is its largest regret across the cells.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from loadgen.arms.specs import FIXED_K
from loadgen.arms.stats import paired_difference_ci
from loadgen.report.numbers import signed

#: Keys of a regret: the point difference of full/floor ratios and its 95% CI.
REGRET_KEYS = ("diff", "low", "high")


def best_fixed_k(summary: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The envelope of a cell: the fixed-K arm with the lowest full/floor among those that ran
    (ties: the smaller K, listed first), its K ("all" for every candidate) and that ratio."""
    ran = [n for n in FIXED_K if summary.get(n, {}).get("ratio_to_floor") is not None]
    if not ran:
        return None
    best = min(ran, key=lambda n: summary[n]["ratio_to_floor"])
    k = FIXED_K[best]
    return {"arm": best, "k": "all" if k is None else k,
            "ratio_to_floor": summary[best]["ratio_to_floor"]}


def envelope_regret(arm: Sequence[float], best: Sequence[float], floor: Sequence[float], *,
                    seed: int = 0, clusters: Sequence[Hashable] | None = None
                    ) -> dict[str, float] | None:
    """``arm``'s full/floor minus the envelope arm's (``best``), with its paired CI; the three
    lists are the same workflows in the same order (``clusters``: each one's seed)."""
    found = paired_difference_ci(arm, best, floor, seed=seed, clusters=clusters)
    return None if found is None else dict(zip(REGRET_KEYS, found, strict=True))


def regret_text(regret: Mapping[str, float] | None) -> str:
    """'+0.012 [+0.004, +0.020]' (the difference and its CI), or '' without a regret."""
    if not regret:
        return ""
    return f"{signed(regret['diff'])} [{signed(regret['low'])}, {signed(regret['high'])}]"


def worst_regret(cells: Sequence[tuple[float, Mapping[str, Any]]]
                 ) -> dict[str, dict[str, Any]]:
    """Per arm, its largest envelope regret over a sweep's cells (``(x, bench arms result)``),
    with the cell's x, the envelope arm there and the CI; arms without a regret are left out."""
    worst: dict[str, dict[str, Any]] = {}
    for x, result in cells:
        against = (result.get("best_fixed_k") or {}).get("arm")
        for name, arm in result.get("arms", {}).items():
            found = arm.get("envelope_regret")
            if found is None or (name in worst and worst[name]["diff"] >= found["diff"]):
                continue
            worst[name] = {"x": x, "against": against, **found}
    return worst


__all__ = ["REGRET_KEYS", "best_fixed_k", "envelope_regret", "regret_text", "worst_regret"]
