"""The cost-model fit of ``dynbranch calibrate``: step samples, least squares, the preset."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from services.engine_agent.cost_model import CostPreset, GpuSpec, ModelSpec, StepWork

#: Memory bandwidth given to the fitted preset: high enough that the roofline's memory term
#: never binds (on this CPU and model the measured step time follows compute and overhead).
UNBOUNDED_BANDWIDTH = 1e15


@dataclass(frozen=True, slots=True)
class StepSample:
    """One measured step time and the work it did (the cost model's inputs)."""

    kind: str
    batch: int
    context: int
    tokens: int
    attn_pairs: int
    kv_read_tokens: int
    sampled: int
    step_s: float


@dataclass(frozen=True, slots=True)
class Fit:
    """Fitted cost coefficients (seconds, per FLOP, per byte)."""

    step_overhead_s: float
    per_seq_overhead_s: float
    s_per_flop: float
    attention_factor: float
    weight_read_s: float
    s_per_kv_byte: float
    rel_residuals: tuple[float, ...]

    @property
    def max_rel_error(self) -> float:
        """Largest relative error of the fit on its own samples."""
        return max(abs(r) for r in self.rel_residuals)

    def predict(self, model: ModelSpec, s: StepSample) -> float:
        """The fitted step time: overhead plus the larger of the compute and memory terms."""
        compute = self.s_per_flop * (_gemm_flops(model, s)
                                     + self.attention_factor * _attn_flops(model, s))
        memory = self.weight_read_s + self.s_per_kv_byte * _kv_bytes(model, s)
        return self.step_overhead_s + self.per_seq_overhead_s * s.batch + max(compute, memory)


def _gemm_flops(model: ModelSpec, s: StepSample) -> float:
    return model.flops_per_token * s.tokens + model.lm_head_flops * s.sampled


def _attn_flops(model: ModelSpec, s: StepSample) -> float:
    return model.attn_flops_per_pair * s.attn_pairs


def _kv_bytes(model: ModelSpec, s: StepSample) -> float:
    return model.kv_bytes_per_token * (s.kv_read_tokens + s.tokens)


def _row(model: ModelSpec, s: StepSample, memory_bound: bool) -> list[float]:
    """Design row [1, seqs, gemm, attn, weight_read, kv_bytes] of the branch that binds."""
    if memory_bound:
        return [1.0, float(s.batch), 0.0, 0.0, 1.0, _kv_bytes(model, s)]
    return [1.0, float(s.batch), _gemm_flops(model, s), _attn_flops(model, s), 0.0, 0.0]


def _nonneg_lstsq(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with coefficients >= 0 (drops the most negative one until none is)."""
    active = [j for j in range(x.shape[1]) if np.any(x[:, j])]
    coef = np.zeros(x.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(x[:, active], y, rcond=None)
        if (sol >= 0).all():
            coef[active] = sol
            break
        active.pop(int(np.argmin(sol)))
    return coef


def fit(model: ModelSpec, samples: Sequence[StepSample], rounds: int = 20) -> Fit:
    """Fit the roofline ``overhead + per_seq·seqs + max(compute, memory)`` on relative error.

    The max makes it piecewise linear: start with prefill steps compute-bound and decode steps
    memory-bound, solve the linear problem, reassign each step to the branch that binds, repeat.
    """
    y = np.array([s.step_s for s in samples])
    w = 1.0 / y  # relative error: a 5 ms decode step matters as much as a 150 ms prefill
    branch = [s.kind == "decode" for s in samples]
    coef = np.zeros(6)
    for _ in range(rounds):
        x = np.array([_row(model, s, b) for s, b in zip(samples, branch, strict=True)])
        coef = _nonneg_lstsq(x * w[:, None], y * w)
        o, p, g, a, wr, kv = (float(v) for v in coef)
        f = Fit(o, p, g, a / g if g > 0 else 1.0, wr, kv, ())
        new = [_memory_binds(f, model, s) for s in samples]
        if new == branch:
            break
        branch = new
    rel = tuple((f.predict(model, s) - s.step_s) / s.step_s for s in samples)
    return dataclasses.replace(f, rel_residuals=rel)


def _memory_binds(f: Fit, model: ModelSpec, s: StepSample) -> bool:
    compute = f.s_per_flop * (_gemm_flops(model, s) + f.attention_factor * _attn_flops(model, s))
    return f.weight_read_s + f.s_per_kv_byte * _kv_bytes(model, s) > compute


def preset_from_fit(name: str, model: ModelSpec, f: Fit, *, block_size: int, kv_blocks: int,
                    max_running: int, max_batched_tokens: int, device: str) -> CostPreset:
    """A ``CostPreset`` whose step times reproduce the fit.

    The cost model has one FLOP rate, so attention's own rate enters as an effective query-head
    count (``attn_flops_per_pair`` is the only reader of ``num_q_heads``). The bandwidth is set
    out of reach and the two efficiencies scale the weight and KV reads to their fitted times:
    on a CPU the KV term is the paged-attention kernel's rate, not a memory bandwidth.
    """
    effective = dataclasses.replace(model, num_q_heads=model.num_q_heads * f.attention_factor)
    bw = UNBOUNDED_BANDWIDTH
    weight_eff = min(1.0, model.weight_read_bytes / (bw * f.weight_read_s)) if f.weight_read_s \
        else 1.0
    kv_eff = min(1.0, 1.0 / (f.s_per_kv_byte * bw)) if f.s_per_kv_byte else 1.0
    gpu = GpuSpec(name=device, memory_bytes=float(kv_blocks * block_size)
                  * model.kv_bytes_per_token + model.weight_bytes,
                  hbm_bytes_per_s=bw, peak_flops=1.0 / f.s_per_flop)
    return CostPreset(
        name=name, model=effective, gpu=gpu, compute_efficiency=1.0,
        memory_efficiency=weight_eff, kv_efficiency=kv_eff,
        step_overhead_s=f.step_overhead_s, per_seq_overhead_s=f.per_seq_overhead_s,
        reserved_bytes=0.0, max_running=max_running, max_batched_tokens=max_batched_tokens,
        block_size=block_size, max_model_len=model.max_model_len, num_kv_blocks=kv_blocks,
        description=(f"{model.name} on {device}, fitted by dynbranch calibrate (max relative "
                     f"step error {f.max_rel_error:.1%}). Effective rates, not datasheet ones: "
                     f"peak_flops is the fitted FLOP rate, num_q_heads carries attention's cost "
                     f"factor {f.attention_factor:.2f}, the efficiencies carry the weight and "
                     f"KV read times"))


def predicted(preset: CostPreset, s: StepSample) -> float:
    """The preset's step time for a measured sample (to report the fit)."""
    work = StepWork(tokens=s.tokens, attn_pairs=s.attn_pairs, kv_read_tokens=s.kv_read_tokens,
                    sampled=s.sampled, seqs=s.batch)
    return preset.step_time(work)


__all__ = ["UNBOUNDED_BANDWIDTH", "Fit", "StepSample", "fit", "predicted", "preset_from_fit"]
