"""The table of admission policies (``policies.POLICIES``): every name builds its policy, and
the settings accept exactly those names."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.admission.baselines import (
    AlwaysPolicy,
    FixedAdapter,
    LoadThresholdPolicy,
    ThresholdPolicy,
)
from services.admission.config import AdmissionSettings
from services.admission.core import PricedController
from services.admission.load_view import LoadTracker
from services.admission.policies import POLICIES, POLICY_NAMES, build_policy

EXPECTED = {"priced": PricedController, "fixed": FixedAdapter, "always": AlwaysPolicy,
            "threshold": ThresholdPolicy, "load_threshold": LoadThresholdPolicy}


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_every_name_builds_its_policy(name: str) -> None:
    policy = build_policy(AdmissionSettings(policy=name), LoadTracker())
    assert type(policy) is EXPECTED[name]
    assert set(POLICIES) == set(EXPECTED)


def test_the_settings_refuse_an_unknown_policy_naming_the_known_ones() -> None:
    with pytest.raises(ValidationError, match="unknown policy 'greedy'; known: priced"):
        AdmissionSettings(policy="greedy")


def test_the_settings_defaults_are_the_cores() -> None:
    from services.admission.core import ControllerSettings

    s, c = AdmissionSettings(), ControllerSettings()
    assert (s.window_s, s.n0, s.cold_fanout, s.class_prior_ms, s.audit_rate, s.fill_kv_blocks) \
        == (c.window_s, c.n0, c.cold_fanout, c.class_prior_ms, c.audit_rate, c.fill_kv_blocks)
