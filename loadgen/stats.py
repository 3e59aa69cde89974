"""Statistics of paired arms: bootstrap confidence intervals and sample-size-aware quantiles.

Arms replay the same schedule, so their workflows pair by id. The ratio of an arm's mean to the
floor's is resampled *by workflow* (a pair stays a pair), with a seeded generator so a run's CI
is reproducible. Quantiles are reported only where the sample supports them: the q-quantile
needs at least ``1 / (1 - q)`` values (p99: 100), otherwise it is ``None`` and a note says why.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

#: Quantiles reported per arm: name → q.
QUANTILES = {"p50": 0.5, "p95": 0.95, "p99": 0.99}
BOOTSTRAP_RESAMPLES = 2000


def min_samples(q: float) -> int:
    """Fewest values for which the nearest-rank ``q``-quantile is not simply the maximum."""
    return max(1, math.ceil(round(1.0 / (1.0 - q), 9)))


def quantile(values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(q * len(ordered)))) - 1]


def supported_quantiles(values: Sequence[float]) -> tuple[dict[str, float | None], str]:
    """``{"p50": …, "p95": …, "p99": …}`` with ``None`` where the sample is too small, and a note
    naming what was withheld ("" when nothing was)."""
    out: dict[str, float | None] = {}
    withheld = []
    for name, q in QUANTILES.items():
        need = min_samples(q)
        if len(values) >= need:
            out[name] = round(quantile(values, q), 3)
        else:
            out[name] = None
            withheld.append(f"{name} needs >= {need} samples")
    note = f"n={len(values)}: " + "; ".join(withheld) if withheld else ""
    return out, note


def ratio_of_means(arm: Sequence[float], floor: Sequence[float]) -> float | None:
    """``mean(arm) / mean(floor)`` (None when the floor's mean is not positive)."""
    if not arm or len(arm) != len(floor):
        return None
    base = sum(floor)
    return sum(arm) / base if base > 0 else None


def paired_bootstrap_ci(arm: Sequence[float], floor: Sequence[float], *, seed: int = 0,
                        resamples: int = BOOTSTRAP_RESAMPLES, level: float = 0.95
                        ) -> tuple[float, float] | None:
    """Percentile CI of ``mean(arm) / mean(floor)``, resampling workflow pairs with replacement.

    ``arm[i]`` and ``floor[i]`` are the same workflow. None for fewer than two pairs.
    """
    if len(arm) != len(floor):
        raise ValueError(f"paired samples differ in length: {len(arm)} vs {len(floor)}")
    n = len(arm)
    if n < 2:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        picks = [rng.randrange(n) for _ in range(n)]
        ratio = ratio_of_means([arm[i] for i in picks], [floor[i] for i in picks])
        if ratio is not None:
            ratios.append(ratio)
    if not ratios:
        return None
    ratios.sort()
    tail = (1.0 - level) / 2
    low = ratios[max(0, math.floor(tail * len(ratios)))]
    high = ratios[min(len(ratios) - 1, math.ceil((1 - tail) * len(ratios)) - 1)]
    return round(low, 3), round(high, 3)


__all__ = ["BOOTSTRAP_RESAMPLES", "QUANTILES", "min_samples", "paired_bootstrap_ci",
           "quantile", "ratio_of_means", "supported_quantiles"]


def paired_difference_ci(a: Sequence[float], b: Sequence[float], floor: Sequence[float], *,
                         seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES,
                         level: float = 0.95) -> tuple[float, float, float] | None:
    """``mean(a)/mean(floor) - mean(b)/mean(floor)`` and its percentile CI, resampling workflow
    triples (the same workflow under arm a, arm b and the floor) with replacement. None for
    fewer than two triples."""
    if not len(a) == len(b) == len(floor):
        raise ValueError("paired samples differ in length")
    n = len(a)
    point = ratio_of_means(a, floor)
    other = ratio_of_means(b, floor)
    if n < 2 or point is None or other is None:
        return None
    rng = random.Random(seed)
    diffs = []
    for _ in range(resamples):
        picks = [rng.randrange(n) for _ in range(n)]
        base = [floor[i] for i in picks]
        ra, rb = ratio_of_means([a[i] for i in picks], base), \
            ratio_of_means([b[i] for i in picks], base)
        if ra is not None and rb is not None:
            diffs.append(ra - rb)
    diffs.sort()
    tail = (1.0 - level) / 2
    low = diffs[max(0, math.floor(tail * len(diffs)))]
    high = diffs[min(len(diffs) - 1, math.ceil((1 - tail) * len(diffs)) - 1)]
    return round(point - other, 4), round(low, 4), round(high, 4)
