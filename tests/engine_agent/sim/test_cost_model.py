"""Cost model: preset arithmetic, roofline shape, the papers' timing shapes, preset files."""

from __future__ import annotations

import json

import pytest

from services.engine_agent.sim.cost_model import (
    CostPreset,
    GiB,
    StepWork,
    get_preset,
    load_preset_file,
    preset_from_dict,
    preset_names,
    preset_to_dict,
    register_preset,
)

H200 = get_preset("qwen3-32b-h200")
RTX = get_preset("qwen3-8b-rtx4090")


def step(preset: CostPreset, *chunks: tuple[int, int]) -> float:
    """Step time of (context, new tokens) chunks, each sampling a token when done."""
    work = StepWork()
    for start, n in chunks:
        work.add(start, n, True)
    return preset.step_time(work)


def decode_s(preset: CostPreset, context: int, tokens: int, others: tuple[int, ...] = ()) -> float:
    """Seconds to decode ``tokens`` from ``context`` beside co-running decodes at ``others``."""
    return sum(step(preset, (context + i, 1), *((c + i, 1) for c in others))
               for i in range(tokens))


def test_known_presets_and_a_clear_error_for_unknown_names() -> None:
    assert {"qwen3-32b-h200", "qwen3-8b-rtx4090", "zero"} <= set(preset_names())
    with pytest.raises(KeyError, match="unknown cost preset 'nope'; known: .*qwen3-32b-h200"):
        get_preset("nope")


def test_kv_bytes_and_pool_size_follow_the_architecture() -> None:
    assert H200.model.kv_bytes_per_token == 2 * 64 * 8 * 128 * 2 == 256 * 1024
    assert RTX.model.kv_bytes_per_token == 2 * 36 * 8 * 128 * 2
    free = 141 * GiB * 0.9 - 32.8e9 * 2 - 4 * GiB
    assert H200.kv_blocks == int(free // (256 * 1024 * 16))
    assert 200_000 < H200.kv_tokens < 300_000
    assert RTX.context_len <= RTX.kv_tokens < 2 * RTX.context_len  # one 32k sequence fits
    assert (H200.max_running, H200.max_batched_tokens) == (1024, 8192)
    assert (RTX.max_running, RTX.max_batched_tokens) == (256, 2048)


def test_zero_preset_takes_no_time_but_keeps_the_limits() -> None:
    zero = get_preset("zero")
    assert step(zero, (0, 8192)) == 0.0 and step(zero, (5000, 1)) == 0.0
    assert zero.kv_blocks == H200.kv_blocks and zero.max_running == H200.max_running


def test_empty_step_is_free() -> None:
    assert H200.step_time(StepWork()) == 0.0


def test_decode_is_memory_bound_and_long_prefill_compute_bound() -> None:
    weights_s = H200.model.weight_read_bytes / (4.8e12 * H200.memory_efficiency)
    assert step(H200, (100, 1)) == pytest.approx(weights_s + 1.5e-3, rel=0.01)
    prefill = step(H200, (0, 8192))
    flops = 8192 * H200.model.flops_per_token / (989e12 * H200.compute_efficiency)
    assert prefill > flops > 10 * weights_s


def test_step_time_grows_with_tokens_context_and_batch() -> None:
    assert step(H200, (0, 64)) < step(H200, (0, 4096)) < step(H200, (0, 8192))
    assert step(H200, (100, 1)) < step(H200, (30_000, 1))
    assert step(H200, (1000, 1)) < step(H200, *[(1000, 1)] * 64) < step(H200, *[(1000, 1)] * 512)
    assert step(H200, (0, 512)) < step(H200, (20_000, 512))  # attention over the context


# --- sanity against the papers' timing shapes (notes/paper-figures.md) -------------------

def test_routing_decode_of_270_tokens_takes_a_few_seconds_on_32b_h200() -> None:
    # Fig. 1: the model-decode resolution window is about 4.6 s; §2.2: ~270 decode tokens.
    assert 3.0 < decode_s(H200, 1000, 270) < 7.0


def test_downstream_prefill_is_much_shorter_than_the_router_decode() -> None:
    # §2.2 F2: prefill of ~263 downstream tokens vs ~270 router decode tokens.
    assert step(H200, (0, 263)) < 0.05 * decode_s(H200, 1000, 270)


def test_decode_interference_grows_with_co_resident_fills_and_their_context() -> None:
    # §2.2 / Fig. 5b: a few fills cost a few percent, dozens cost tens of percent, and
    # growing the fills' context multiplies the slowdown. Decode traffic alone (no prefill
    # interleaving) sits below the papers' end-to-end numbers.
    alone = decode_s(H200, 1500, 50)
    assert decode_s(H200, 1500, 50, (300,) * 3) / alone < 1.1
    assert decode_s(H200, 1500, 50, (1500,) * 48) / alone > 1.15
    short = decode_s(H200, 1500, 50, (50,) * 24)
    assert decode_s(H200, 1500, 50, (6000,) * 24) / short > 1.3


def test_8b_on_rtx4090_decodes_at_tens_of_tokens_per_second() -> None:
    assert 35 < 1 / step(RTX, (1000, 1)) < 70


# --- building, validating and loading presets -------------------------------------------

def test_preset_from_dict_overrides_a_base() -> None:
    preset = preset_from_dict({"name": "h200-small", "base": "qwen3-32b-h200",
                               "num_kv_blocks": 4096, "gpu": {"hbm_bytes_per_s": 2.4e12}})
    assert preset.kv_blocks == 4096 and preset.gpu.hbm_bytes_per_s == 2.4e12
    assert preset.model == H200.model and preset.gpu.peak_flops == H200.gpu.peak_flops
    assert step(preset, (100, 1)) > step(H200, (100, 1))


def test_preset_round_trips_through_a_dict() -> None:
    assert preset_from_dict(preset_to_dict(RTX)) == RTX


@pytest.mark.parametrize("data, message", [
    ({"name": "x", "base": "zero", "colour": 1}, "unknown key.*colour"),
    ({"name": "x", "base": "zero", "model": {"layers": 3}}, "unknown key.*in model: layers"),
    ({"name": "x", "model": preset_to_dict(RTX)["model"]}, "missing key 'gpu'"),
    ({"base": "zero"}, "missing key 'name'"),
    ({"name": "x", "base": "zero", "memory_efficiency": 1.5}, "memory_efficiency must be in"),
    ({"name": "x", "base": "zero", "num_kv_blocks": 10}, "max_model_len 32768 exceeds the KV pool"),
])
def test_bad_preset_dicts_fail_naming_the_key(data: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        preset_from_dict(data)


def test_full_preset_dict_needs_every_required_key() -> None:
    data = preset_to_dict(RTX)
    del data["max_running"], data["reserved_bytes"]
    with pytest.raises(ValueError, match="missing key.*preset.reserved_bytes, preset.max_running"):
        preset_from_dict(data)


def test_presets_load_from_json_and_yaml_files(tmp_path) -> None:
    as_json = tmp_path / "p.json"
    as_json.write_text(json.dumps({"name": "test-json", "base": "zero", "max_running": 3}))
    as_yaml = tmp_path / "p.yaml"
    as_yaml.write_text("presets:\n  - name: test-yaml\n    base: qwen3-8b-rtx4090\n"
                       "    step_overhead_s: 0.002\n")
    assert load_preset_file(as_json)[0].max_running == 3
    assert load_preset_file(as_yaml)[0].step_overhead_s == 0.002
    assert get_preset("test-yaml").model == RTX.model and get_preset("test-json").zero_cost


def test_register_refuses_to_shadow_a_preset_silently() -> None:
    with pytest.raises(ValueError, match="already exists"):
        register_preset(H200)
