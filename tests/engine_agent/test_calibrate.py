"""Fitting the sim's cost model to step-time measurements, and the committed ``tiny-cpu`` preset."""

from __future__ import annotations

import random

import pytest

from services.engine_agent.calibrate import (
    PRESET_DIR,
    Fit,
    StepSample,
    TokenText,
    fit,
    predicted,
    preset_from_fit,
    tiny_model_spec,
    write_preset,
)
from services.engine_agent.cost_model import load_preset_file

MODEL = tiny_model_spec(2048)


def samples_from(truth: Fit, noise: float = 0.0, seed: int = 1) -> list[StepSample]:
    rng = random.Random(seed)
    out = []
    for n in (64, 128, 256, 512, 1024, 1536):
        s = StepSample("prefill", 1, n, n, n * (n + 1) // 2, 0, 1, 0.0)
        out.append(s)
    for b in (1, 2, 4, 8):
        for c in (150, 550, 1050):
            out.append(StepSample("decode", b, c, b, b * (c + 1), b * c, b, 0.0))
    return [StepSample(s.kind, s.batch, s.context, s.tokens, s.attn_pairs, s.kv_read_tokens,
                       s.sampled, truth.predict(MODEL, s) * (1 + rng.uniform(-noise, noise)))
            for s in out]


TRUTH = Fit(step_overhead_s=3e-3, per_seq_overhead_s=2e-4, s_per_flop=2e-11,
            attention_factor=0.5, weight_read_s=0.0, s_per_kv_byte=4e-10, rel_residuals=())


def test_fit_recovers_the_roofline_it_was_made_from() -> None:
    got = fit(MODEL, samples_from(TRUTH))
    assert got.max_rel_error < 1e-6
    assert got.step_overhead_s == pytest.approx(TRUTH.step_overhead_s, rel=1e-4)
    assert got.s_per_flop == pytest.approx(TRUTH.s_per_flop, rel=1e-4)
    assert got.s_per_kv_byte == pytest.approx(TRUTH.s_per_kv_byte, rel=1e-4)


def test_fit_is_robust_to_noise_and_keeps_coefficients_non_negative() -> None:
    got = fit(MODEL, samples_from(TRUTH, noise=0.1))
    assert got.max_rel_error < 0.25
    assert min(got.step_overhead_s, got.per_seq_overhead_s, got.s_per_flop,
               got.s_per_kv_byte, got.weight_read_s) >= 0


def test_preset_reproduces_the_fit_and_round_trips_through_a_file(tmp_path) -> None:
    samples = samples_from(TRUTH, noise=0.05)
    f = fit(MODEL, samples)
    preset = preset_from_fit("fit-test", MODEL, f, block_size=128, kv_blocks=256,
                             max_running=16, max_batched_tokens=2048, device="test cpu")
    for s in samples:
        assert predicted(preset, s) == pytest.approx(f.predict(MODEL, s), rel=1e-6)
    path = tmp_path / "fit-test.yaml"
    write_preset(preset, samples, path)
    [loaded] = load_preset_file(path, register=False)
    assert loaded == preset


def test_committed_tiny_cpu_preset_loads_and_matches_the_engine_layout() -> None:
    [preset] = load_preset_file(PRESET_DIR / "tiny-cpu.yaml", register=False)
    assert preset.name == "tiny-cpu" and preset.block_size == 128
    assert preset.context_len == 2048 and preset.kv_blocks == 256 and preset.max_running == 16
    assert 1e-3 < preset.step_overhead_s < 20e-3  # a CPU step costs milliseconds


def test_token_text_counts_and_shares_prefixes() -> None:
    def tokenize(text: str) -> list[str]:  # whitespace "tokenizer": lines never merge
        return text.split()

    text = TokenText(tokenize)
    a, n = text.segment("k", 50)
    assert n >= 50 and len(tokenize(a)) == n and a.endswith("\n")
    assert text.segment("k", 50) == (a, n)  # deterministic
    assert text.segment("other", 50)[0] != a
