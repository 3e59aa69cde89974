"""Fixed admission policy: the configurable stand-in until load-priced admission (C3) lands.

It opens every branch (or none) and admits the top K candidates by rank, so the experiment arms
(floor, C1-only, C2-only, full) can be run by configuration alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.common.values.candidates import RankedCandidate


@dataclass(frozen=True, slots=True)
class Decision:
    """An admission answer with the reason recorded in traces."""

    admitted: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class FixedPolicy:
    """Open every branch when ``open_branches``; admit the ``top_k`` best-ranked candidates."""

    open_branches: bool = True
    top_k: int = 2

    def open_branch(self, coordinate: str) -> tuple[bool, str]:
        """Action 0 under the fixed policy."""
        return self.open_branches, f"fixed policy: open_branches={self.open_branches}"

    def admit(self, candidates: list[RankedCandidate]) -> Decision:
        """Action 1 under the fixed policy: the top K by rank (ties: given order)."""
        ranked = sorted(enumerate(candidates), key=lambda ic: (ic[1].rank, ic[0]))
        chosen = tuple(c.candidate for _, c in ranked[: self.top_k])
        return Decision(chosen, f"fixed policy: top {self.top_k} of {len(candidates)}")


__all__ = ["Decision", "FixedPolicy"]
