"""Statistics of paired arms: bootstrap confidence intervals and sample-size-aware quantiles.

Arms replay the same schedule, so their workflows pair by id. The ratio of an arm's mean to the
floor's is resampled with its pairs kept whole (a pair stays a pair), with a seeded generator so
a run's CI is reproducible. Workflows of one seed are not independent: they ran on one mesh and
share its engines' load and its library. With more than one seed the resampling is therefore a
two-stage cluster bootstrap (``clusters``: each workflow's seed): draw seeds with replacement,
then workflows with replacement within each drawn seed — Davison & Hinkley, *Bootstrap Methods
and Their Application* (1997), §3.8, resampling at both stages; Field & Welsh, "Bootstrapping
clustered data", JRSS B 69 (2007). Resampling whole seeds alone has too few distinct resamples
to give a 95% percentile interval at the seed counts a bench runs (3 seeds: 10); the two-stage
scheme carries the within-seed variance about twice over, so it errs wide (conservative). One
seed keeps the per-workflow bootstrap (one cluster: the same draws as before clusters existed).
Quantiles are reported only where the sample supports them: the q-quantile needs at least
``1 / (1 - q)`` values (p99: 100), otherwise it is ``None`` and a note says why.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Sequence

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


def cluster_groups(n: int, clusters: Sequence[Hashable] | None) -> list[list[int]]:
    """Indices ``0..n-1`` grouped by their cluster (first-seen order); one group without
    clusters."""
    if clusters is None:
        return [list(range(n))]
    if len(clusters) != n:
        raise ValueError(f"clusters name {len(clusters)} samples, not {n}")
    groups: dict[Hashable, list[int]] = {}
    for i, c in enumerate(clusters):
        groups.setdefault(c, []).append(i)
    return list(groups.values())


def resample(rng: random.Random, groups: Sequence[Sequence[int]]) -> list[int]:
    """One bootstrap draw of indices: per workflow within one group, else two-stage (groups
    with replacement, then indices with replacement within each drawn group)."""
    drawn = groups if len(groups) == 1 else [groups[rng.randrange(len(groups))] for _ in groups]
    return [g[rng.randrange(len(g))] for g in drawn for _ in g]


def _percentiles(values: list[float], level: float) -> tuple[float, float]:
    values.sort()
    tail = (1.0 - level) / 2
    low = values[max(0, math.floor(tail * len(values)))]
    high = values[min(len(values) - 1, math.ceil((1 - tail) * len(values)) - 1)]
    return low, high


def paired_bootstrap_ci(arm: Sequence[float], floor: Sequence[float], *, seed: int = 0,
                        resamples: int = BOOTSTRAP_RESAMPLES, level: float = 0.95,
                        clusters: Sequence[Hashable] | None = None
                        ) -> tuple[float, float] | None:
    """Percentile CI of ``mean(arm) / mean(floor)``, resampling workflow pairs with replacement
    (by cluster first where ``clusters`` names more than one: module docstring).

    ``arm[i]`` and ``floor[i]`` are the same workflow. None for fewer than two pairs.
    """
    if len(arm) != len(floor):
        raise ValueError(f"paired samples differ in length: {len(arm)} vs {len(floor)}")
    n = len(arm)
    if n < 2:
        return None
    groups = cluster_groups(n, clusters)
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        picks = resample(rng, groups)
        ratio = ratio_of_means([arm[i] for i in picks], [floor[i] for i in picks])
        if ratio is not None:
            ratios.append(ratio)
    if not ratios:
        return None
    low, high = _percentiles(ratios, level)
    return round(low, 3), round(high, 3)


def paired_difference_ci(a: Sequence[float], b: Sequence[float], floor: Sequence[float], *,
                         seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES,
                         level: float = 0.95, clusters: Sequence[Hashable] | None = None
                         ) -> tuple[float, float, float] | None:
    """``mean(a)/mean(floor) - mean(b)/mean(floor)`` and its percentile CI, resampling workflow
    triples (the same workflow under arm a, arm b and the floor) with replacement, by cluster
    first where ``clusters`` names more than one. None for fewer than two triples."""
    if not len(a) == len(b) == len(floor):
        raise ValueError("paired samples differ in length")
    n = len(a)
    point = ratio_of_means(a, floor)
    other = ratio_of_means(b, floor)
    if n < 2 or point is None or other is None:
        return None
    groups = cluster_groups(n, clusters)
    rng = random.Random(seed)
    diffs = []
    for _ in range(resamples):
        picks = resample(rng, groups)
        base = [floor[i] for i in picks]
        ra = ratio_of_means([a[i] for i in picks], base)
        rb = ratio_of_means([b[i] for i in picks], base)
        if ra is not None and rb is not None:
            diffs.append(ra - rb)
    if not diffs:
        return None
    low, high = _percentiles(diffs, level)
    return round(point - other, 4), round(low, 4), round(high, 4)


__all__ = ["BOOTSTRAP_RESAMPLES", "QUANTILES", "cluster_groups", "min_samples",
           "paired_bootstrap_ci", "paired_difference_ci", "quantile", "ratio_of_means",
           "resample", "supported_quantiles"]
