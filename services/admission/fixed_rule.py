"""The fixed admission rule: open every branch (or none) and admit the top K candidates by
rank. The ``fixed`` and ``fixed1`` baselines apply it behind the priced controller's calls
(``baselines.FixedAdapter``), and the gateway applies it in-process without an admission service
(``client.StaticAdmission``), so the experiment arms (floor, C1-only, C2-only, full) can run by
configuration alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.common.values.candidates import RankedCandidate

#: Candidates admitted per branch by default (the ``fixed`` baseline's top-2).
TOP_K = 2


@dataclass(frozen=True, slots=True)
class RuleDecision:
    """An admission answer with the reason recorded in traces."""

    admitted: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class TopKRule:
    """Open every branch when ``open_branches``; admit the ``top_k`` best-ranked candidates."""

    open_branches: bool = True
    top_k: int = TOP_K

    def open_branch(self, coordinate: str) -> tuple[bool, str]:
        """Action 0 under the fixed rule."""
        return self.open_branches, f"fixed policy: open_branches={self.open_branches}"

    def admit(self, candidates: list[RankedCandidate]) -> RuleDecision:
        """Action 1 under the fixed rule: the top K by rank (ties: given order)."""
        ranked = sorted(enumerate(candidates), key=lambda ic: (ic[1].rank, ic[0]))
        chosen = tuple(c.candidate for _, c in ranked[: self.top_k])
        return RuleDecision(chosen, f"fixed policy: top {self.top_k} of {len(candidates)}")


__all__ = ["TOP_K", "RuleDecision", "TopKRule"]
