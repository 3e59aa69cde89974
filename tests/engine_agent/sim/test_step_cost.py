"""The step model: GPU presets keep their roofline step times; measured presets add their
named per-unit costs; the preset file format keeps the two apart."""

from __future__ import annotations

import pytest

from services.engine_agent.sim.cost_model import get_preset, preset_from_dict, preset_to_dict
from services.engine_agent.sim.step_cost import CostPreset, GpuSpec, MeasuredCost, StepWork

#: (preset, case) → step seconds, computed before measured presets existed (the roofline must
#: not move when the model grows a second way to price a step).
PINNED = {
    ("qwen3-32b-h200", "decode_1x1000"): 0.018417389155555557,
    ("qwen3-32b-h200", "prefill_2048"): 0.26891458001899293,
    ("qwen3-32b-h200", "mixed"): 0.1423548289410718,
    ("qwen3-32b-h200", "decode_64x6000"): 0.09319188017777778,
    ("qwen3-8b-rtx4090", "decode_1x1000"): 0.02034868666666667,
    ("qwen3-8b-rtx4090", "prefill_2048"): 0.3607167944399032,
    ("qwen3-8b-rtx4090", "mixed"): 0.19001885023457626,
    ("qwen3-0.6b-h200", "prefill_2048"): 0.006198447690806875,
    ("qwen3-0.6b-h200", "decode_64x6000"): 0.03751876311111112,
    ("qwen2.5-7b-rtxpro5000", "decode_1x1000"): 0.014382701825396823,
    ("qwen2.5-7b-rtxpro5000", "mixed"): 0.11439186167268217,
}
CASES = {"decode_1x1000": [(1000, 1)], "prefill_2048": [(0, 2048)],
         "mixed": [(512, 1024)] + [(3000, 1)] * 32, "decode_64x6000": [(6000, 1)] * 64}


def work(chunks: list[tuple[int, int]]) -> StepWork:
    w = StepWork()
    for start, n in chunks:
        w.add(start, n, True)
    return w


@pytest.mark.parametrize("name, case", sorted(PINNED))
def test_gpu_presets_keep_their_roofline_step_times(name: str, case: str) -> None:
    assert get_preset(name).step_time(work(CASES[case])) == pytest.approx(PINNED[name, case],
                                                                          rel=1e-12)


def measured_preset(**changes) -> CostPreset:
    base = dict(name="m", model=get_preset("qwen3-8b-rtx4090").model,
                gpu=GpuSpec(name="a cpu", memory_bytes=64 * (1 << 30)),
                measured=MeasuredCost(s_per_token=2e-5, s_per_attention_pair=1e-8,
                                      s_per_kv_read_token=1e-7),
                step_overhead_s=4e-3, per_seq_overhead_s=1e-4, reserved_bytes=0.0,
                max_running=16, max_batched_tokens=2048, block_size=128, num_kv_blocks=256,
                max_model_len=2048)
    return CostPreset(**(base | changes))


def test_measured_preset_adds_its_named_costs() -> None:
    preset = measured_preset()
    w = work([(512, 100), (300, 1), (700, 1)])
    expected = (4e-3 + 1e-4 * 3 + 2e-5 * w.tokens + 1e-8 * w.attn_pairs
                + 1e-7 * w.kv_read_tokens)
    assert preset.step_time(w) == pytest.approx(expected, rel=1e-12)
    assert preset.step_time(StepWork()) == 0.0


def test_a_roofline_preset_needs_its_efficiencies_and_peak_rates() -> None:
    with pytest.raises(ValueError, match="missing key 'compute_efficiency'"):
        measured_preset(measured=None)
    with pytest.raises(ValueError, match="gpu.hbm_bytes_per_s must be > 0"):
        measured_preset(measured=None, compute_efficiency=0.5, memory_efficiency=0.8,
                        kv_efficiency=0.3)


def test_measured_costs_must_be_non_negative() -> None:
    with pytest.raises(ValueError, match="measured.s_per_token must be >= 0"):
        MeasuredCost(s_per_token=-1e-6, s_per_attention_pair=0.0, s_per_kv_read_token=0.0)


def test_a_measured_preset_round_trips_without_roofline_keys() -> None:
    preset = measured_preset()
    data = preset_to_dict(preset)
    assert "compute_efficiency" not in data and "peak_flops" not in data["gpu"]
    assert set(data["measured"]) == {"s_per_token", "s_per_attention_pair",
                                     "s_per_kv_read_token"}
    assert preset_from_dict(data) == preset
    with pytest.raises(ValueError, match="unknown key.*in measured: flops"):
        preset_from_dict(data | {"measured": data["measured"] | {"flops": 1.0}})
