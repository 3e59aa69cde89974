"""A ranked branch candidate: what the gateway's predictors propose and admission prices, and
the gateway's estimate of what filling it would cost."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RankedCandidate:
    """One proposed candidate: its rank (0 = top) and normalized score (a probability)."""

    candidate: str
    rank: int
    probability: float = 0.0


@dataclass(frozen=True, slots=True)
class FillEstimate:
    """What the gateway projects a candidate's fill to cost (proto ``Candidate.est_*``): engine
    seconds of its subgraph's llm stages (0: unknown), the prompt tokens its first stage
    prefills and the tokens it holds at its peak (0: unknown), and its stage count."""

    exec_s: float = 0.0
    prompt_tokens: int = 0
    peak_tokens: int = 0
    stages: int = 1


__all__ = ["FillEstimate", "RankedCandidate"]
