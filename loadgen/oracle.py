"""The oracle bound of a run, from the floor's trace (dynbranch §3.1 Eq. 1, §3.3 Eq. 2).

    bound = Σ_j P_hit_j · T_sub_j  +  Σ_k P_cov_k · min(T_gen_k, T_exec_k)

over the floor's realized calls, in schedule order. ``P_hit`` is 1 for a call whose exact request
name (stage, version, model, full prompt, sampling) already occurred earlier in the run: C1 could
have served it, saving its stage time ``T_sub``. A branch is a call without a candidate (the
decider) followed by calls that carry one (the selected subgraph). ``P_cov`` is 1 when the
selection is in the decider's offered list; an open-vocabulary decider (no list, e.g. ReAct's
entity) counts as covered, the oracle predictor's case. ``T_gen`` is the resolution window of the
decision's kind: for a model-decided branch the decider's own time (its decode: fills start when
it is demanded), for a user-wait branch (``window: user``, HCI) only the user's think time after
the offer (fills render the offer's text, so they cannot start before it is out). ``T_exec`` is
the subgraph's time less the calls C1 already counts, so no saving is counted twice. With
post-click latency (HCI) only post-click calls count. An arm's ``oracle_share`` is its saving
against the floor divided by this bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from loadgen.recording import CallRecord


@dataclass(frozen=True, slots=True)
class OracleBound:
    """The bound and its two terms, in simulated seconds summed over the run's workflows."""

    reuse_s: float
    overlap_s: float
    hits: int
    branches: int
    covered: int

    @property
    def total_s(self) -> float:
        """Reuse plus overlap."""
        return self.reuse_s + self.overlap_s

    def as_json(self) -> dict[str, float | int]:
        """Rounded figures for ``--json``."""
        return {"bound_s": round(self.total_s, 3), "reuse_s": round(self.reuse_s, 3),
                "overlap_s": round(self.overlap_s, 3), "hits": self.hits,
                "branches": self.branches, "covered": self.covered}


def _hits(workflows: Sequence[Sequence[CallRecord]]) -> list[list[bool]]:
    seen: set[str] = set()
    out = []
    for calls in workflows:
        flags = []
        for call in calls:
            flags.append(call.name in seen)
            seen.add(call.name)
        out.append(flags)
    return out


def _branches(calls: Sequence[CallRecord], hit: Sequence[bool], post_click_only: bool
              ) -> list[tuple[bool, float, float]]:
    """(covered, T_gen, T_exec) of each branch of one workflow."""
    found = []
    for i, decider in enumerate(calls):
        if decider.candidate or i + 1 >= len(calls) or not calls[i + 1].candidate:
            continue
        selection = calls[i + 1].candidate
        covered = selection in decider.offered if decider.offered else True
        window = calls[i + 1].wait_s if decider.user_window else decider.latency_s
        j, work = i + 1, 0.0
        while j < len(calls) and calls[j].candidate == selection:
            if not hit[j] and (calls[j].post_click or not post_click_only):
                work += calls[j].latency_s
            j += 1
        found.append((covered, window, work))
    return found


def oracle_bound(workflows: Sequence[Sequence[CallRecord]], *, post_click_only: bool = False
                 ) -> OracleBound:
    """The bound over ``workflows`` (each one's calls, in schedule order)."""
    hits = _hits(workflows)
    reuse = overlap = 0.0
    n_hits = n_branches = n_covered = 0
    for calls, hit in zip(workflows, hits, strict=True):
        for call, h in zip(calls, hit, strict=True):
            if h and (call.post_click or not post_click_only):
                reuse += call.latency_s
                n_hits += 1
        for covered, window, work in _branches(calls, hit, post_click_only):
            n_branches += 1
            n_covered += covered
            overlap += min(window, work) if covered else 0.0
    return OracleBound(reuse, overlap, n_hits, n_branches, n_covered)


def summed(bounds: Iterable[OracleBound]) -> OracleBound:
    """The bound of several independent runs (one per seed, each on its own mesh): their sum."""
    parts = list(bounds)
    return OracleBound(sum(b.reuse_s for b in parts), sum(b.overlap_s for b in parts),
                       sum(b.hits for b in parts), sum(b.branches for b in parts),
                       sum(b.covered for b in parts))


def oracle_share(saving_s: float, bound: OracleBound) -> float | None:
    """``saving_s / bound`` (None for an empty bound)."""
    return round(saving_s / bound.total_s, 3) if bound.total_s > 0 else None


__all__ = ["OracleBound", "oracle_bound", "oracle_share", "summed"]
