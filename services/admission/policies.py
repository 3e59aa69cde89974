"""The one table of admission policies: the priced controller (C3, dynbranch §3.4) and the
baselines it is judged against (``baselines``), by the name ``AdmissionSettings.policy`` takes.
The settings' check, the experiment arms and the report derive their names from ``POLICIES``;
adding a policy is its own class and one line here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from services.admission.baselines import (
    AlwaysPolicy,
    FixedAdapter,
    LoadThresholdPolicy,
    StaticRule,
    ThresholdPolicy,
)
from services.admission.core import AdmissionPolicy, ControllerSettings, PricedController
from services.admission.fixed_rule import TopKRule
from services.admission.load_view import LoadTracker
from services.admission.pricing import PriceCurves


def _priced(s: Any, tracker: LoadTracker) -> AdmissionPolicy:
    return PricedController(
        tracker, PriceCurves(slot_stretch=s.slot_stretch, kv_stretch=s.kv_stretch,
                             prefill_s_per_token=s.prefill_s_per_token),
        ControllerSettings(window_s=s.window_s, n0=s.n0, cold_fanout=s.cold_fanout,
                           class_prior_ms=s.class_prior_ms, audit_rate=s.audit_rate, seed=s.seed,
                           default_gain_ms=s.default_gain_ms, fill_kv_blocks=s.fill_kv_blocks,
                           gain_prior_weight=s.gain_prior_weight,
                           restored_selection=s.restored_selection,
                           restored_calibration=s.restored_calibration,
                           max_snapshots=s.max_snapshots))


#: Policy name → builder from (``AdmissionSettings``, the engines' load tracker). The settings
#: are typed loosely here so that the settings module can check names against this table.
POLICIES: dict[str, Callable[[Any, LoadTracker], AdmissionPolicy]] = {
    "priced": _priced,
    "fixed": lambda s, _t: FixedAdapter(TopKRule(open_branches=s.open_branches, top_k=s.top_k)),
    "always": lambda _s, _t: AlwaysPolicy(),
    "threshold": lambda s, _t: ThresholdPolicy(s.p_star),
    "load_threshold": lambda s, t: LoadThresholdPolicy(
        t, s.top_k, StaticRule(s.free_workers, s.max_queue, s.free_canonical)),
}
POLICY_NAMES: tuple[str, ...] = tuple(POLICIES)


def build_policy(settings: Any, tracker: LoadTracker) -> AdmissionPolicy:
    """The policy ``settings.policy`` names, over ``tracker``."""
    return POLICIES[settings.policy](settings, tracker)


__all__ = ["POLICIES", "POLICY_NAMES", "build_policy"]
