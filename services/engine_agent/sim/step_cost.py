"""Step time of a continuous-batching engine: the model, the device, the per-step work, and the
two ways a preset prices a step.

A step runs every scheduled token (prefill chunks and decodes alike) through the model once.
A *roofline* preset (the GPU presets: datasheet rates, assumed efficiencies) prices it as::

    step_s = overhead + per_seq_overhead × seqs + max(compute_s, memory_s)
    compute_s = (2·P_ne × tokens + 4·L·H_q·d × attention_pairs + 2·V·h × sampled)
                / (peak_flops × compute_efficiency)
    memory_s  = weight_read_bytes / (hbm_bandwidth × memory_efficiency)
                + kv_bytes_per_token × (kv_read_tokens + tokens) / (hbm_bandwidth × kv_efficiency)

A *measured* preset (fitted by ``dynbranch calibrate`` to an engine on the machine at hand)
prices it with per-unit times measured there (``MeasuredCost``), added, not max'ed: on a CPU the
matmuls, attention and KV gathers run one after another on the same cores::

    step_s = overhead + per_seq_overhead × seqs + s_per_token × tokens
             + s_per_attention_pair × attention_pairs + s_per_kv_read_token × kv_read_tokens

``attention_pairs`` counts (query token, context position) pairs, causal within a chunk;
``kv_read_tokens`` is every scheduled sequence's prior context (what paged attention gathers).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Architecture of a dense decoder-only model (from its model card / config.json)."""

    name: str
    num_layers: int
    hidden_size: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    num_params: float
    non_embedding_params: float
    vocab_size: int
    max_model_len: int
    weight_bytes_per_param: float = 2.0  # BF16 weights
    kv_bytes_per_elem: float = 2.0  # BF16 KV cache

    @property
    def kv_bytes_per_token(self) -> float:
        """K and V of every layer for one token."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.kv_bytes_per_elem

    @property
    def weight_bytes(self) -> float:
        """Resident weights (the pool gets what they leave)."""
        return self.num_params * self.weight_bytes_per_param

    @property
    def weight_read_bytes(self) -> float:
        """Weights streamed per step: every matmul plus the LM head (not the embedding table)."""
        lm_head = self.vocab_size * self.hidden_size
        return (self.non_embedding_params + lm_head) * self.weight_bytes_per_param

    @property
    def flops_per_token(self) -> float:
        """Matmul FLOPs of one token through the layers (2 × non-embedding params)."""
        return 2 * self.non_embedding_params

    @property
    def attn_flops_per_pair(self) -> float:
        """QKᵀ and AV FLOPs for one (query, context position) pair over all layers."""
        return 4 * self.num_layers * self.num_q_heads * self.head_dim

    @property
    def lm_head_flops(self) -> float:
        """LM-head FLOPs per sampled token (logits only where a token is sampled)."""
        return 2 * self.vocab_size * self.hidden_size


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """The device: its memory, and for a roofline preset its peak rates (datasheet numbers).

    A measured preset leaves the rates out (None): its step times come from measurements.
    """

    name: str
    memory_bytes: float
    hbm_bytes_per_s: float | None = None
    peak_flops: float | None = None
    #: Host link, one direction (PCIe per the datasheet): what a KV block reload from CPU
    #: memory crosses (``offload.py``); None where unknown (no offloading modelled).
    host_link_bytes_per_s: float | None = None


@dataclass(frozen=True, slots=True)
class MeasuredCost:
    """Per-unit step costs measured on one engine and machine (seconds; all >= 0)."""

    #: per scheduled token, prefill or decode: the layers' matmuls and norms
    s_per_token: float
    #: per (query token, context position) pair: attention's QKᵀ and AV
    s_per_attention_pair: float
    #: per prior-context token of a scheduled sequence: the paged KV gather
    s_per_kv_read_token: float

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if not getattr(self, f.name) >= 0:
                raise ValueError(f"measured.{f.name} must be >= 0")

    def work_s(self, tokens: int, attn_pairs: int, kv_read_tokens: int) -> float:
        """Seconds of a step's work, before the step and per-sequence overheads."""
        return (self.s_per_token * tokens + self.s_per_attention_pair * attn_pairs
                + self.s_per_kv_read_token * kv_read_tokens)


@dataclass(slots=True)
class StepWork:
    """What one engine step computes, summed over its scheduled sequences."""

    tokens: int = 0
    attn_pairs: int = 0
    kv_read_tokens: int = 0
    sampled: int = 0
    seqs: int = 0

    def add(self, start: int, n: int, sampled: bool) -> None:
        """Add ``n`` tokens of one sequence whose first ``start`` tokens are already in KV."""
        self.tokens += n
        self.attn_pairs += n * start + n * (n + 1) // 2
        self.kv_read_tokens += start
        self.sampled += sampled
        self.seqs += 1


_ROOFLINE_KEYS = ("compute_efficiency", "memory_efficiency", "kv_efficiency")


@dataclass(frozen=True, slots=True, kw_only=True)
class CostPreset:
    """A model on a device plus the engine limits it runs with, priced by a roofline (the
    efficiencies and the device's peak rates) or by ``measured`` per-unit costs."""

    name: str
    model: ModelSpec
    gpu: GpuSpec
    step_overhead_s: float
    per_seq_overhead_s: float
    reserved_bytes: float
    max_running: int
    max_batched_tokens: int
    compute_efficiency: float | None = None  # roofline presets only
    memory_efficiency: float | None = None
    kv_efficiency: float | None = None
    measured: MeasuredCost | None = None  # set: step times from measurements, not the roofline
    gpu_memory_utilization: float = 0.9
    block_size: int = 16
    max_model_len: int | None = None  # None: the model's
    num_kv_blocks: int | None = None  # None: derived from memory
    zero_cost: bool = False
    description: str = ""

    def __post_init__(self) -> None:
        if self.measured is None:
            self._check_roofline()
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"preset {self.name!r}: gpu_memory_utilization must be in (0, 1]")
        for key in ("max_running", "max_batched_tokens", "block_size"):
            if getattr(self, key) < 1:
                raise ValueError(f"preset {self.name!r}: {key} must be >= 1")
        if self.kv_blocks < 1:
            raise ValueError(f"preset {self.name!r}: no memory left for the KV cache")
        if self.context_len > self.kv_tokens:  # vLLM refuses to start in this case too
            raise ValueError(
                f"preset {self.name!r}: max_model_len {self.context_len} exceeds the KV pool "
                f"({self.kv_blocks} blocks x {self.block_size} = {self.kv_tokens} tokens)")

    def _check_roofline(self) -> None:
        for key in _ROOFLINE_KEYS:
            value = getattr(self, key)
            if value is None:
                raise ValueError(f"preset {self.name!r}: missing key {key!r} (a roofline "
                                 "preset needs it; a measured one gives 'measured' instead)")
            if not 0.0 < value <= 1.0:
                raise ValueError(f"preset {self.name!r}: {key} must be in (0, 1]")
        for key in ("hbm_bytes_per_s", "peak_flops"):
            if not (getattr(self.gpu, key) or 0) > 0:
                raise ValueError(f"preset {self.name!r}: gpu.{key} must be > 0 "
                                 "(a roofline preset needs the device's peak rates)")

    @property
    def context_len(self) -> int:
        """Longest sequence (prompt + output) the engine accepts."""
        return self.max_model_len or self.model.max_model_len

    @property
    def kv_blocks(self) -> int:
        """Blocks in the KV pool."""
        if self.num_kv_blocks is not None:
            return self.num_kv_blocks
        usable = self.gpu.memory_bytes * self.gpu_memory_utilization
        kv_bytes = usable - self.model.weight_bytes - self.reserved_bytes
        return int(kv_bytes // (self.model.kv_bytes_per_token * self.block_size))

    @property
    def kv_tokens(self) -> int:
        """Tokens the KV pool holds."""
        return self.kv_blocks * self.block_size

    def step_time(self, work: StepWork) -> float:
        """Simulated seconds of one engine step (0 for an empty step or the ``zero`` preset)."""
        if self.zero_cost or work.tokens == 0:
            return 0.0
        overhead = self.step_overhead_s + self.per_seq_overhead_s * work.seqs
        if self.measured is not None:
            return overhead + self.measured.work_s(work.tokens, work.attn_pairs,
                                                   work.kv_read_tokens)
        return overhead + self._roofline_s(work)

    def _roofline_s(self, work: StepWork) -> float:
        m, gpu = self.model, self.gpu
        flops = (m.flops_per_token * work.tokens + m.attn_flops_per_pair * work.attn_pairs
                 + m.lm_head_flops * work.sampled)
        kv_bytes = m.kv_bytes_per_token * (work.kv_read_tokens + work.tokens)
        bandwidth = float(gpu.hbm_bytes_per_s or 0)  # validated > 0 for roofline presets
        compute_s = flops / (float(gpu.peak_flops or 0) * float(self.compute_efficiency or 0))
        memory_s = (m.weight_read_bytes / (bandwidth * float(self.memory_efficiency or 0))
                    + kv_bytes / (bandwidth * float(self.kv_efficiency or 0)))
        return max(compute_s, memory_s)

    def with_overrides(self, **changes: Any) -> CostPreset:
        """A copy with some fields replaced (e.g. a small pool for tests)."""
        return dataclasses.replace(self, **changes)


__all__ = ["CostPreset", "GpuSpec", "MeasuredCost", "ModelSpec", "StepWork"]
