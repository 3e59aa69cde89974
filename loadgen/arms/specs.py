"""The experiment arms: which mechanisms each turns on, and the order they run in.

``full`` is DynBranch with priced admission (C3), starting cold; ``full_warm`` starts from what
the controller learned on the train split (as a restart with its saved state would); the
admission baselines are the full arm with the admission service's policy swapped
(``services/admission/config.py``): ``fixed`` (top 2), ``fixed1`` / ``fixed3`` (top 1 / 3),
``always``, ``threshold`` and ``load_threshold`` (the paper's static control); ``whole_request``
is the floor behind an exact whole-request cache (``loadgen.arms.recording``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ArmSpec:
    """One arm: the gateway's mechanisms, its admission policy and the harness-side cache."""

    name: str
    c1: bool
    c2: bool
    #: Admission service policy; "" keeps the gateway's in-process fixed policy (top-K).
    admission: str = ""
    whole_request_cache: bool = False
    #: Admission service settings this arm sets over the run's (``AdmissionSettings`` fields).
    settings: tuple[tuple[str, object], ...] = ()
    #: The priced controller starts from state learned on the train split (``bench arms``
    #: trains it on other workflows first; a restart with ``state_path`` in production).
    warm: bool = False
    #: One of the paper's four mechanism arms (floor, C1, C2, both): run by name, it keeps the
    #: run's own admission setting rather than this spec's (``ARMS``).
    mechanism: bool = False


ARM_SPECS: dict[str, ArmSpec] = {spec.name: spec for spec in (
    ArmSpec("floor", False, False, mechanism=True),
    ArmSpec("c1", True, False, mechanism=True),
    ArmSpec("c2", False, True, mechanism=True),
    ArmSpec("full", True, True, "priced", mechanism=True),
    ArmSpec("full_warm", True, True, "priced", warm=True),
    ArmSpec("fixed", True, True, "fixed"),
    ArmSpec("fixed1", True, True, "fixed", settings=(("top_k", 1),)),
    ArmSpec("fixed3", True, True, "fixed", settings=(("top_k", 3),)),
    ArmSpec("always", True, True, "always"),
    ArmSpec("threshold", True, True, "threshold"),
    # the paper's static control over the engines as workers (baselines.StaticRule)
    ArmSpec("load_threshold", True, True, "load_threshold"),
    ArmSpec("whole_request", False, False, whole_request_cache=True),
)}
ALL_ARMS = tuple(ARM_SPECS)
QUICK_ARMS = ("floor", "c1", "c2", "full", "whole_request")
#: The arms that differ only in their admission policy (what C3 is judged against).
ADMISSION_ARMS = tuple(n for n, s in ARM_SPECS.items() if s.admission)
#: The arms that run the priced controller (cold and warm).
PRICED_ARMS = tuple(n for n, s in ARM_SPECS.items() if s.admission == "priced")
#: The fixed fan-outs by K (None: every candidate), C1 alone admitting none: the lowest of them
#: in a cell is its envelope, the fixed K chosen in hindsight (``loadgen.arms.envelope``).
FIXED_K: dict[str, int | None] = {"c1": 0, "fixed1": 1, "fixed": 2, "fixed3": 3, "always": None}


def resolve(names: Sequence[str]) -> tuple[ArmSpec, ...]:
    """Specs of ``names`` (floor added first when missing: every ratio needs it)."""
    unknown = [n for n in names if n not in ARM_SPECS]
    if unknown:
        raise ValueError(f"unknown arm(s) {', '.join(unknown)}; known: {', '.join(ALL_ARMS)}")
    ordered = list(dict.fromkeys(["floor", *names]))
    return tuple(ARM_SPECS[n] for n in ordered)


#: Mechanism arm name → (c1, c2) (``ArmSpec.mechanism``).
ARMS: dict[str, tuple[bool, bool]] = {n: (s.c1, s.c2) for n, s in ARM_SPECS.items() if s.mechanism}


def spec_of(arm: str | ArmSpec) -> ArmSpec:
    """The spec of ``arm``: a mechanism arm by name keeps the run's admission (``ARMS``)."""
    if isinstance(arm, ArmSpec):
        return arm
    if arm in ARMS:
        return ArmSpec(arm, *ARMS[arm])
    if arm in ARM_SPECS:
        return ARM_SPECS[arm]
    raise KeyError(f"unknown arm {arm!r}; known: {', '.join(ARM_SPECS)}")


def rotated(arms: Sequence[ArmSpec], seed: int) -> tuple[ArmSpec, ...]:
    """``arms`` rotated by ``seed``, so no arm always runs first (or last) across seeds."""
    if not arms:
        return ()
    k = seed % len(arms)
    return tuple(arms[k:]) + tuple(arms[:k])


__all__ = ["ADMISSION_ARMS", "ALL_ARMS", "ARMS", "ARM_SPECS", "FIXED_K", "PRICED_ARMS",
           "QUICK_ARMS", "ArmSpec", "resolve", "rotated", "spec_of"]
