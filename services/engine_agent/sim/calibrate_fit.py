"""The cost-model fit of ``dynbranch calibrate``: step samples, least squares, the preset.

The fitted model is the measured step model of ``step_cost``::

    step_s = step_overhead_s + per_seq_overhead_s × seqs + s_per_token × tokens
             + s_per_attention_pair × attention_pairs + s_per_kv_read_token × kv_read_tokens

It is linear in its five coefficients, so the fit is one non-negative least squares on relative
error. The preset it yields keeps the model's real shape and names each fitted rate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from services.engine_agent.sim.step_cost import (
    CostPreset,
    GpuSpec,
    MeasuredCost,
    ModelSpec,
    StepWork,
)


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
    """Fitted step costs (seconds per step, per sequence, and ``measured``'s per-unit rates)."""

    step_overhead_s: float
    per_seq_overhead_s: float
    measured: MeasuredCost
    rel_residuals: tuple[float, ...] = ()

    @property
    def max_rel_error(self) -> float:
        """Largest relative error of the fit on its own samples."""
        return max((abs(r) for r in self.rel_residuals), default=0.0)

    @property
    def mean_rel_error(self) -> float:
        """Mean relative error (absolute) of the fit on its own samples."""
        rs = self.rel_residuals
        return sum(abs(r) for r in rs) / len(rs) if rs else 0.0

    def predict(self, s: StepSample) -> float:
        """The fitted step time of a sample."""
        return (self.step_overhead_s + self.per_seq_overhead_s * s.batch
                + self.measured.work_s(s.tokens, s.attn_pairs, s.kv_read_tokens))


def _row(s: StepSample) -> list[float]:
    """Design row: [1, seqs, tokens, attention pairs, KV read tokens]."""
    return [1.0, float(s.batch), float(s.tokens), float(s.attn_pairs), float(s.kv_read_tokens)]


def fit(samples: Sequence[StepSample]) -> Fit:
    """Fit the measured step model on relative error with every coefficient >= 0."""
    if not samples:
        raise ValueError("no step samples to fit")
    y = np.array([s.step_s for s in samples])
    x = np.array([_row(s) for s in samples]) / y[:, None]  # relative error: a 5 ms decode step
    scale = np.abs(x).max(axis=0)                          # counts as much as a 150 ms prefill
    scale[scale == 0] = 1.0
    coef, _ = nnls(x / scale, np.ones_like(y))
    o, p, t, a, kv = (float(v) for v in coef / scale)
    f = Fit(o, p, MeasuredCost(s_per_token=t, s_per_attention_pair=a, s_per_kv_read_token=kv))
    rel = tuple((f.predict(s) - s.step_s) / s.step_s for s in samples)
    return dataclasses.replace(f, rel_residuals=rel)


def preset_from_fit(name: str, model: ModelSpec, f: Fit, *, block_size: int, kv_blocks: int,
                    max_running: int, max_batched_tokens: int, device: str) -> CostPreset:
    """A measured ``CostPreset`` whose step times are the fit's; the model keeps its real shape
    and the device its real pool size (weights plus the KV blocks the engine allocated)."""
    gpu = GpuSpec(name=device, memory_bytes=float(kv_blocks * block_size)
                  * model.kv_bytes_per_token + model.weight_bytes)
    return CostPreset(
        name=name, model=model, gpu=gpu, measured=f.measured,
        step_overhead_s=f.step_overhead_s, per_seq_overhead_s=f.per_seq_overhead_s,
        reserved_bytes=0.0, max_running=max_running, max_batched_tokens=max_batched_tokens,
        block_size=block_size, max_model_len=model.max_model_len, num_kv_blocks=kv_blocks,
        description=(f"{model.name} on {device}, fitted by dynbranch calibrate (step error "
                     f"mean {f.mean_rel_error:.1%}, max {f.max_rel_error:.1%} on "
                     f"{len(f.rel_residuals)} measured steps); step times from 'measured'"))


def predicted(preset: CostPreset, s: StepSample) -> float:
    """The preset's step time for a measured sample (to report the fit)."""
    work = StepWork(tokens=s.tokens, attn_pairs=s.attn_pairs, kv_read_tokens=s.kv_read_tokens,
                    sampled=s.sampled, seqs=s.batch)
    return preset.step_time(work)


def rel_errors(preset: CostPreset, samples: Sequence[StepSample]) -> list[float]:
    """The preset's relative step-time error on each sample ((predicted − measured) / measured)."""
    return [(predicted(preset, s) - s.step_s) / s.step_s for s in samples]


__all__ = ["Fit", "StepSample", "fit", "predicted", "preset_from_fit", "rel_errors"]
