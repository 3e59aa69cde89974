"""Fitting the sim's measured step model to step times, and the committed ``tiny-cpu`` preset."""

from __future__ import annotations

import dataclasses
import random

import pytest

from services.engine_agent.backends.tiny_model import TinyModelConfig
from services.engine_agent.calibrate import (
    PRESET_DIR,
    Fit,
    StepSample,
    TokenText,
    fit,
    predicted,
    preset_from_fit,
    steady_decode_step_s,
    tiny_model_spec,
    write_preset,
)
from services.engine_agent.sim.cost_model import load_preset_file
from services.engine_agent.sim.step_cost import MeasuredCost

MODEL = tiny_model_spec(2048)
TRUTH = Fit(step_overhead_s=3e-3, per_seq_overhead_s=2e-4,
            measured=MeasuredCost(s_per_token=3e-5, s_per_attention_pair=1.5e-8,
                                  s_per_kv_read_token=1.2e-7))


def grid_samples() -> list[StepSample]:
    """The calibration grid's shapes (step times left at 0)."""
    out = [StepSample("prefill", 1, n, n, n * (n + 1) // 2, 0, 1, 0.0)
           for n in (64, 128, 256, 512, 1024, 1536)]
    out += [StepSample("decode", b, c, b, b * (c + 1), b * c, b, 0.0)
            for b in (1, 2, 4, 8) for c in (150, 550, 1050)]
    return out


def samples_from(truth: Fit, noise: float = 0.0, seed: int = 1) -> list[StepSample]:
    """Grid samples timed by ``truth`` itself, optionally with relative noise."""
    rng = random.Random(seed)
    return [dataclasses.replace(s, step_s=truth.predict(s) * (1 + rng.uniform(-noise, noise)))
            for s in grid_samples()]


def test_preset_keeps_the_real_model_shape_and_names_the_fitted_rates(tmp_path) -> None:
    samples = samples_from(TRUTH, noise=0.05)
    f = fit(samples)
    preset = preset_from_fit("fit-test", MODEL, f, block_size=128, kv_blocks=256,
                             max_running=16, max_batched_tokens=2048, device="test cpu")
    assert preset.model == MODEL and preset.measured == f.measured
    assert preset.compute_efficiency is None and preset.gpu.peak_flops is None
    for s in samples:
        assert predicted(preset, s) == pytest.approx(f.predict(s), rel=1e-9)
    path = tmp_path / "fit-test.yaml"
    write_preset(preset, samples, path)
    assert "num_q_heads: 4\n" in path.read_text() and "s_per_attention_pair" in path.read_text()
    [loaded] = load_preset_file(path, register=False)
    assert loaded == preset


def test_committed_tiny_cpu_preset_is_measured_on_the_true_tiny_model() -> None:
    [preset] = load_preset_file(PRESET_DIR / "tiny-cpu.yaml", register=False)
    config = TinyModelConfig()
    assert preset.name == "tiny-cpu" and preset.model == tiny_model_spec(2048)
    assert preset.model.num_q_heads == config.num_attention_heads
    assert preset.model.num_layers == config.num_hidden_layers
    assert preset.measured is not None and preset.kv_efficiency is None
    assert preset.block_size == 128 and preset.kv_blocks == 256 and preset.max_running == 16
    assert 1e-3 < preset.step_overhead_s < 20e-3  # a CPU step costs milliseconds
    assert 1e-6 < preset.measured.s_per_token < 1e-3


def test_steady_decode_step_counts_only_the_window_where_every_sequence_decodes() -> None:
    # Sequence a starts at 0 and outputs every 10 ms until b's prefill lands at 0.1 s (a 60 ms
    # step); from then on both decode together at 5 ms a step, b finishing first.
    a = [(0.01 * i, 1) for i in range(5)] + [(0.1 + 0.005 * i, 1) for i in range(21)]
    b = [(0.1 + 0.005 * i, 1) for i in range(11)]
    assert steady_decode_step_s([a, b]) == pytest.approx(0.005)
    coalesced = [(0.1, 1), (0.11, 2), (0.12, 2)]  # two tokens per output: 5 ms a token
    assert steady_decode_step_s([coalesced]) == pytest.approx(0.005)
    assert steady_decode_step_s([[(0.0, 1)], [(1.0, 1)]]) is None  # no common window


def test_token_text_counts_and_shares_prefixes() -> None:
    def tokenize(text: str) -> list[str]:  # whitespace "tokenizer": lines never merge
        return text.split()

    text = TokenText(tokenize)
    a, n = text.segment("k", 50)
    assert n >= 50 and len(tokenize(a)) == n and a.endswith("\n")
    assert text.segment("k", 50) == (a, n)  # deterministic
    assert text.segment("other", 50)[0] != a
