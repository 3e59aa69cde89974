"""Profiles: how much of a schedule recurs, and how long its decisions take, as stated knobs.

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
- ``window``: the data's recurrence, with the deciding stage's decode capped at
  ``WINDOW_MAX_TOKENS`` (``decision_max_tokens``): the decision resolves while its fills still
  run, the regime in which a demand adopts a running fill. Routing's router names the function
  without reasoning first (its prompt asks for "the function name only"), ReAct's think and
  Sub-Agent's plan name their entity or sub-task at once. The paper's windows are already
  shorter than the work they precede (dynbranch §2.2 F3: 0.36-0.77x at p50 outside HCI), and its
  gain "depends on ... how much execution each fill hides within the remaining resolution
  window" (§5.5); this profile takes the window far below that. HCI has no such knob: a user's
  think time resolves its branches, not a decode.

Each bench and report run states the profile and every knob it set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadgen.workloads import WORKLOADS

#: The ``window`` profile's cap of a deciding stage's decode: a choice named at once, with no
#: reasoning before it (the sim's outputs reach EOS after 32-512 tokens, so a capped stage
#: decodes this many unless a stop string ends it first).
WINDOW_MAX_TOKENS = 32



@dataclass(frozen=True, slots=True)
class ScheduleProfile:
    """One profile: the workload options it sets, and whether it sets recurrence alone."""

    #: Workload name → the ``get_workload`` options the profile sets for it.
    options: dict[str, dict[str, Any]]
    #: Sets recurrence alone (``dynbranch report`` runs its matrix over these).
    recurrence: bool = False


#: Profile name → what it sets; the one table of them (module docstring).
PROFILES: dict[str, ScheduleProfile] = {
    "data": ScheduleProfile({}, recurrence=True),
    "paper": ScheduleProfile({name: dict(w.paper_profile) for name, w in WORKLOADS.items()
                              if w.paper_profile}, recurrence=True),
    "window": ScheduleProfile({name: {"decision_max_tokens": WINDOW_MAX_TOKENS}
                               for name, w in WORKLOADS.items() if w.decision_stage}),
}
#: The profile of the data sets' own recurrence: every run's default.
DEFAULT_PROFILE = "data"
#: The profiles that set recurrence alone (``dynbranch report`` runs its matrix over them).
RECURRENCE_PROFILES = tuple(name for name, p in PROFILES.items() if p.recurrence)


def profile_options(profile: str, workload: str) -> dict[str, Any]:
    """The workload options a profile sets (``get_workload`` keywords); ValueError naming the
    known profiles otherwise."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; known: {', '.join(PROFILES)}")
    return dict(PROFILES[profile].options.get(workload, {}))


def knobs(workload: Any) -> dict[str, float]:
    """The recurrence knobs a workload harness runs with."""
    return {k: getattr(workload, k) for k in ("replay_rate", "retrieval_recurrence",
                                              "subtask_recurrence") if hasattr(workload, k)}


def window_knobs(workload: Any) -> dict[str, Any]:
    """The decision-window knob a workload harness runs with: its deciding stage and that
    stage's decode cap (None: the template's own ``max_tokens``)."""
    return {"decision_stage": workload.decision_stage or None,
            "decision_max_tokens": workload.decision_max_tokens}


__all__ = ["DEFAULT_PROFILE", "PROFILES", "RECURRENCE_PROFILES", "WINDOW_MAX_TOKENS",
           "ScheduleProfile", "knobs", "profile_options", "window_knobs"]
