"""Fitting the sim's step-cost model to measured steps (``sim.calibrate_fit``): the fit recovers
the parameters timings were made from, stays sane under noise, and refuses no data."""

from __future__ import annotations

import dataclasses

import pytest

from services.engine_agent.sim.calibrate_fit import fit
from tests.engine_agent.test_calibrate import TRUTH, samples_from


def test_fit_recovers_every_parameter_it_was_made_from() -> None:
    got = fit(samples_from(TRUTH))
    assert got.max_rel_error < 1e-6 and got.mean_rel_error < 1e-6
    assert got.step_overhead_s == pytest.approx(TRUTH.step_overhead_s, rel=1e-4)
    assert got.per_seq_overhead_s == pytest.approx(TRUTH.per_seq_overhead_s, rel=1e-4)
    for name in ("s_per_token", "s_per_attention_pair", "s_per_kv_read_token"):
        assert getattr(got.measured, name) == pytest.approx(getattr(TRUTH.measured, name),
                                                            rel=1e-4), name


def test_fit_is_robust_to_noise_and_keeps_coefficients_non_negative() -> None:
    got = fit(samples_from(TRUTH, noise=0.1))
    assert got.max_rel_error < 0.25
    assert got.measured.s_per_token == pytest.approx(TRUTH.measured.s_per_token, rel=0.2)
    no_kv = dataclasses.replace(TRUTH, measured=dataclasses.replace(
        TRUTH.measured, s_per_kv_read_token=0.0))
    clamped = fit(samples_from(no_kv, noise=0.1, seed=3))
    assert min(clamped.step_overhead_s, clamped.per_seq_overhead_s,
               *dataclasses.astuple(clamped.measured)) >= 0


def test_fit_refuses_an_empty_sample_set() -> None:
    with pytest.raises(ValueError, match="no step samples"):
        fit([])
