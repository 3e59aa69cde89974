"""Leak guard: do the gateway's predictors hit because of what they read, or because of list order?

For each workload, ``decisions`` builds the decision contexts a run would hand the gateway (the
candidate list as the harness passes it as ``offered``, the observation, the ground truth), and
``guard`` runs the predictor the gateway would use (``default_predictor``, plus ``CorpusTitles``
over the retrieval corpus for ReAct, as ``services/gateway/server.py`` wires it) on them twice:
as given, and with every candidate list shuffled by another seed. If the harness leaked the answer
through list order, shuffling would change the top-1/2/3 coverage by more than sampling noise.
ReAct's space is open (no list), so its shuffle permutes the sentences of the passage the
predictor reads, i.e. the order its candidate names appear in.

What the predictor learns is fitted on the train split and measured on the test split
(``loadgen.workloads.base.split_of``): the frequency prior is warmed with the train split's
selections, the word-overlap weight is chosen on the train split, then the test split is ranked
online (each resolved selection observed after it is ranked, as the branch manager does).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.workloads import WORKLOADS, get_workload
from loadgen.workloads.base import Decision, data_path, read_jsonl
from loadgen.workloads.react import HOTPOTQA_FILE
from services.gateway import (
    TITLE_WEIGHT,
    CompositePredictor,
    CorpusTitles,
    PredictionContext,
    default_predictor,
)

WORKLOAD_NAMES = tuple(WORKLOADS)
#: Word-overlap weights the fit chooses from (the gateway's default is 2.0).
OVERLAP_WEIGHTS = (0.5, 1.0, 2.0, 4.0)
TOP = (1, 2, 3)


@dataclass(frozen=True, slots=True)
class Coverage:
    """Share of decisions whose selection is in the predictor's top 1, 2, 3."""

    n: int
    top: tuple[float, float, float]


@dataclass(frozen=True, slots=True)
class GuardResult:
    """One workload's coverage as given and shuffled, and what was fitted on the train split."""

    workload: str
    given: Coverage
    shuffled: Coverage
    fitted: dict[str, float] = field(default_factory=dict)

    @property
    def delta(self) -> tuple[float, float, float]:
        """Shuffled minus given coverage, per top-k."""
        a, b = self.given.top, self.shuffled.top
        return (b[0] - a[0], b[1] - a[1], b[2] - a[2])

    def noise(self, z: float = 2.0) -> tuple[float, float, float]:
        """``z`` binomial standard errors of the difference of two shares of ``n`` each."""
        n = max(1, self.given.n)
        return tuple(z * math.sqrt(2 * p * (1 - p) / n) for p in self.given.top)  # type: ignore

    def within_noise(self, z: float = 2.0, eps: float = 0.01) -> bool:
        """Whether every |Δ| is at most ``z`` standard errors plus ``eps``."""
        return all(abs(d) <= s + eps for d, s in zip(self.delta, self.noise(z), strict=True))


# -- decision contexts ----------------------------------------------------------------------------

def decisions(name: str, split: str = "test", seed: int = 0,
              data_dir: str | Path | None = None, limit: int = 600) -> list[Decision]:
    """The decisions of up to ``limit`` instances of ``name``'s ``split``, drawn with ``seed``."""
    workload = get_workload(name, data_dir, split=split)
    return workload.decisions(min(limit, len(workload.split_pool())), random.Random(seed))


def corpus_titles(data_dir: str | Path | None = None) -> list[str]:
    """Every paragraph title of the HotpotQA sample (the gateway's ``hotpotqa`` corpus)."""
    return sorted({t for r in read_jsonl(data_path(data_dir, HOTPOTQA_FILE))
                   for t, _ in r["context"]})


# -- predictors -----------------------------------------------------------------------------------

def predictor(name: str, overlap_weight: float = 2.0, titles: Sequence[str] = ()
              ) -> CompositePredictor:
    """The predictor the gateway would run for ``name``'s template."""
    extra = ([(CorpusTitles(titles=titles), TITLE_WEIGHT)] if WORKLOADS[name].corpus_source
             else [])
    return default_predictor(k=3, extra=extra, overlap_weight=overlap_weight)


def coverage(pred: CompositePredictor, items: Sequence[Decision], learn: bool = True
             ) -> Coverage:
    """Top-1/2/3 coverage of ``pred`` over ``items``, observing each selection after ranking."""
    hits = [0, 0, 0]
    for d in items:
        ranked = [rc.candidate for rc in pred.rank(d.coordinate, PredictionContext(
            d.candidates, d.observation, d.exclude))]
        for k in TOP:
            hits[k - 1] += d.truth in ranked[:k]
        if learn:
            pred.observe(d.coordinate, d.truth)
    n = len(items)
    return Coverage(n, tuple(h / n if n else 0.0 for h in hits))  # type: ignore[arg-type]


def fit(name: str, train: Sequence[Decision], titles: Sequence[str] = ()
        ) -> tuple[float, CompositePredictor]:
    """The word-overlap weight best on ``train``, and a predictor of it warmed on ``train``."""
    def score(w: float) -> float:
        return sum(coverage(predictor(name, w, titles), train).top)

    weight = max(OVERLAP_WEIGHTS, key=score) if WORKLOADS[name].fits_overlap_weight else 2.0
    return weight, warmed(name, weight, train, titles)


def warmed(name: str, weight: float, train: Sequence[Decision], titles: Sequence[str] = ()
           ) -> CompositePredictor:
    """A predictor of ``weight`` whose prior has observed ``train``'s selections."""
    pred = predictor(name, weight, titles)
    for d in train:
        pred.observe(d.coordinate, d.truth)
    return pred


def guard(name: str, seed: int = 0, shuffle_seed: int = 1,
          data_dir: str | Path | None = None) -> GuardResult:
    """``name``'s test-split coverage as given and shuffled, after fitting on its train split."""
    titles = corpus_titles(data_dir) if WORKLOADS[name].corpus_source else ()
    train = decisions(name, "train", seed, data_dir)
    test = decisions(name, "test", seed, data_dir)
    weight, _ = fit(name, train, titles)
    rng = random.Random(shuffle_seed)
    shuffled = [d.shuffled(rng) for d in test]
    results = []
    for items in (test, shuffled):
        results.append(coverage(warmed(name, weight, train, titles), items))
    return GuardResult(name, results[0], results[1],
                       {"overlap_weight": weight, "train": len(train), "test": len(test)})


def guard_all(seed: int = 0, shuffle_seed: int = 1,
              data_dir: str | Path | None = None) -> dict[str, GuardResult]:
    """``guard`` for every workload."""
    return {name: guard(name, seed, shuffle_seed, data_dir) for name in WORKLOAD_NAMES}


def check(workload: Any) -> dict[str, Any]:
    """``guard`` of a workload as JSON (``bench arms`` reports it as ``leak_guard``)."""
    result = guard(workload.name, data_dir=getattr(workload, "data_dir", None))
    return {"split": "test", "n": result.given.n,
            "given_top123": [round(x, 4) for x in result.given.top],
            "shuffled_top123": [round(x, 4) for x in result.shuffled.top],
            "delta_top123": [round(x, 4) for x in result.delta],
            "noise_top123": [round(x, 4) for x in result.noise()],
            "within_noise": result.within_noise(), "fitted": result.fitted}


__all__ = ["Coverage", "Decision", "GuardResult", "check", "coverage", "decisions", "fit",
           "guard", "guard_all", "predictor", "warmed"]
