"""A ranked branch candidate: what the gateway's predictors propose and admission prices."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RankedCandidate:
    """One proposed candidate: its rank (0 = top) and normalized score (a probability)."""

    candidate: str
    rank: int
    probability: float = 0.0


__all__ = ["RankedCandidate"]
