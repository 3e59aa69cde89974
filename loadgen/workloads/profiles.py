"""Recurrence profiles: how much of a schedule recurs, as stated knobs.

A schedule's recurrence sets what C1 can remove: ``replay_rate`` (whole workflows replayed
exactly, dynbranch Fig. 10), ReAct's ``retrieval_recurrence`` (retrievals of an entity an earlier
question retrieved) and Sub-Agent's ``subtask_recurrence`` (sub-tasks an earlier question had).

- ``data``: as the data sets give it, at the rates dynbranch §2.2 measured on them (Routing 25%
  exact replays; ReAct 12% of retrievals recur; Sub-Agent 26% of sub-tasks recur; HCI none).
- ``paper``: the recurrence behind the paper's reported results. Routing replays 45% of its
  workflows, so C1 removes about 40-48% of the floor's time as §5.5 reports across λ; ReAct
  repeats whole questions as its reproducibility appendix does (38 repeated-question groups
  holding 96 of 116 executions over three seeds: half the executions repeat an earlier one,
  in groups of two to three), on top of its retrieval recurrence.

Each bench and report run states the profile and every knob it set.
"""

from __future__ import annotations

from typing import Any

from loadgen.workloads import WORKLOADS

PROFILES: dict[str, dict[str, dict[str, Any]]] = {
    "data": {},
    "paper": {name: dict(w.paper_profile) for name, w in WORKLOADS.items() if w.paper_profile},
}


def profile_options(profile: str, workload: str) -> dict[str, Any]:
    """The workload options a profile sets (``get_workload`` keywords); ValueError naming the
    known profiles otherwise."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")
    return dict(PROFILES[profile].get(workload, {}))


def knobs(workload: Any) -> dict[str, float]:
    """The recurrence knobs a workload harness runs with."""
    return {k: getattr(workload, k) for k in ("replay_rate", "retrieval_recurrence",
                                              "subtask_recurrence") if hasattr(workload, k)}


__all__ = ["PROFILES", "knobs", "profile_options"]
