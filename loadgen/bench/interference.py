"""``dynbranch bench interference``: canonical stretch against co-resident fills (the method of
dynbranch Figure 5b), and the admission price slopes fitted to it.

On the engine backend in use (the sim with a preset; the default is ``qwen3-32b-h200``), a
canonical request of fixed shape runs alone, then beside n co-resident fills of a fixed context
(n = 1, 3, 12, 24, 48), then beside 24 fills of growing context (up to the workloads' prompt
lengths: Routing's handler prompt is about 850 tokens, ReAct's hop about 1,000), then while k
fills of a workload-length prompt arrive during its decode and prefill (k = 1, 4). Its stretch is
its decode-phase time over the time alone, minus one; every figure is measured side by side in
one run. Fitted:

- ``slot_stretch``: least-squares slope of stretch against n at the short context (per fill);
- ``kv_stretch``: slope of stretch against the fills' share of the KV pool at n = 24;
- ``prefill_s_per_token``: the canonical request's added decode seconds per prompt token the
  arriving fills prefilled.

The fitted prices are checked against a point they were not fitted on: n fills of the workload
context (the prediction ``n (slot_stretch + kv_stretch share)`` beside the measured stretch).
These are the three parameters of ``services.admission.pricing.PriceCurves`` (settings
``slot_stretch``, ``kv_stretch`` and ``prefill_s_per_token`` of the admission service). The sim
is a model of an engine: its curve is what its cost model implies, not a GPU measurement.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from loadgen.bench.fidelity import sim_text
from services.common.values.generation import GenerationRequest, Priority, Sampling
from services.engine_agent import Finished, TokenDelta

logger = logging.getLogger(__name__)

PRESET = "qwen3-32b-h200"
MODEL = "m"
COUNTS = (0, 1, 3, 12, 24, 48)
CONTEXTS = (64, 850, 2048, 4096)  # fill prompt tokens at n = 24
SHORT = 64
#: A workload-length fill prompt (Routing's handler stage, about 850 tokens).
WORKLOAD_CONTEXT = 850
PREFILL_FILLS = (1, 4)
CHECK_COUNT = 12
CANONICAL_PROMPT, CANONICAL_TOKENS = 256, 128
FILL_TOKENS = 4096  # fills outlive the canonical request


async def _canonical_time(backend: Any, n: int, context: int, tag: str) -> tuple[float, float]:
    """Decode seconds of the canonical request beside ``n`` fills, and the fills' KV share."""
    fills, started = [], [asyncio.Event() for _ in range(n)]
    for i in range(n):
        request = GenerationRequest(f"{tag}-fill-{i}", MODEL, sim_text(f"{tag}/f{i}", context),
                                    Sampling(max_tokens=FILL_TOKENS, ignore_eos=True),
                                    Priority.FILL)
        fills.append(asyncio.create_task(_drain(backend, request, started[i])))
    # every fill is co-resident (prefilled, decoding) before the canonical request arrives
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), 120)
    load = backend.load()
    share = load.fill_kv_blocks / max(load.kv_blocks_total, 1)
    canonical = GenerationRequest(f"{tag}-canonical", MODEL,
                                  sim_text(f"{tag}/c", CANONICAL_PROMPT),
                                  Sampling(max_tokens=CANONICAL_TOKENS, ignore_eos=True))
    finished = await _drain(backend, canonical)
    for i in range(n):
        await backend.abort(f"{tag}-fill-{i}")
    await asyncio.gather(*fills, return_exceptions=True)
    assert finished is not None
    return finished.timings.decode_s, share


async def _drain(backend: Any, request: GenerationRequest,
                 first_token: asyncio.Event | None = None) -> Finished | None:
    last = None
    async for event in backend.generate(request):
        if isinstance(event, TokenDelta) and first_token is not None:
            first_token.set()
        if isinstance(event, Finished):
            last = event
    return last


async def _prefill_stall(backend: Any, k: int, context: int, tag: str) -> float:
    """Decode seconds of the canonical request while ``k`` fills of ``context`` prompt tokens
    arrive once it decodes (each generates one token: the prefill is all they cost)."""
    first = asyncio.Event()
    canonical = GenerationRequest(f"{tag}-canonical", MODEL,
                                  sim_text(f"{tag}/c", CANONICAL_PROMPT),
                                  Sampling(max_tokens=CANONICAL_TOKENS, ignore_eos=True))
    task = asyncio.create_task(_drain(backend, canonical, first))
    await asyncio.wait_for(first.wait(), 120)
    fills = [GenerationRequest(f"{tag}-fill-{i}", MODEL, sim_text(f"{tag}/f{i}", context),
                               Sampling(max_tokens=1, ignore_eos=True), Priority.FILL)
             for i in range(k)]
    await asyncio.gather(*(_drain(backend, f) for f in fills))
    finished = await task
    assert finished is not None
    return finished.timings.decode_s


def _slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope through the origin."""
    den = sum(x * x for x in xs)
    return sum(x * y for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


async def measure(quick: bool) -> dict[str, Any]:
    """The stretch table and the fitted slopes."""
    from services.engine_agent import SimBackend

    backend = SimBackend(PRESET, time_scale=0.002 if quick else 0.01, model=MODEL)
    await backend.start()
    try:
        alone, _ = await _canonical_time(backend, 0, SHORT, "alone")
        by_count = {}
        for n in COUNTS[1:]:
            t, share = await _canonical_time(backend, n, SHORT, f"n{n}")
            by_count[n] = (t / alone - 1.0, share)
        by_context = {}
        for c in CONTEXTS:
            t, share = await _canonical_time(backend, 24, c, f"c{c}")
            by_context[c] = (t / alone - 1.0, share)
        check_t, check_share = await _canonical_time(backend, CHECK_COUNT, WORKLOAD_CONTEXT,
                                                     "check")
        stalls = {}
        for k in PREFILL_FILLS:
            stalls[k] = await _prefill_stall(backend, k, WORKLOAD_CONTEXT, f"p{k}") - alone
    finally:
        await backend.close()
    counts = list(by_count)
    slot = _slope([float(n) for n in counts], [by_count[n][0] for n in counts])
    base = by_context[CONTEXTS[0]]
    kv = _slope([by_context[c][1] - base[1] for c in CONTEXTS[1:]],
                [by_context[c][0] - base[0] for c in CONTEXTS[1:]])
    prefill = _slope([float(k * WORKLOAD_CONTEXT) for k in stalls], list(stalls.values()))
    base_share = by_count[CHECK_COUNT][1] / CHECK_COUNT if CHECK_COUNT in by_count else 0.0
    per_fill_share = check_share / CHECK_COUNT - base_share
    predicted = CHECK_COUNT * (slot + kv * per_fill_share)
    return {"preset": PRESET, "simulated": True, "canonical_alone_decode_s": round(alone, 4),
            "prefill_stall_s": {str(k): round(v, 5) for k, v in stalls.items()},
            "prefill_s_per_token": float(f"{prefill:.3g}"),
            "check": {"fills": CHECK_COUNT, "context": WORKLOAD_CONTEXT,
                      "measured_stretch": round(check_t / alone - 1.0, 4),
                      "predicted_stretch": round(predicted, 4)},
            "stretch_by_fills": {str(n): round(s, 4) for n, (s, _) in by_count.items()},
            "stretch_by_context_at_24": {str(c): round(s, 4) for c, (s, _) in by_context.items()},
            "fill_kv_share_by_context_at_24": {str(c): round(sh, 4)
                                               for c, (_, sh) in by_context.items()},
            "slot_stretch": round(slot, 5), "kv_stretch": round(kv, 4)}


def run(quick: bool) -> dict[str, Any]:
    """Measure, print a table, return the JSON figures."""
    result = asyncio.run(measure(quick))
    print(f"interference on the sim ({result['preset']}, SIMULATED): canonical decode alone "
          f"{result['canonical_alone_decode_s']:.3f} s")
    for n, s in result["stretch_by_fills"].items():
        print(f"  {n:>3} fills of {SHORT} tokens: stretch {100 * s:6.1f}%")
    for c, s in result["stretch_by_context_at_24"].items():
        share = result["fill_kv_share_by_context_at_24"][c]
        print(f"  24 fills of {c:>5} tokens (KV share {100 * share:5.1f}%): stretch "
              f"{100 * s:6.1f}%")
    for k, stall in result["prefill_stall_s"].items():
        print(f"  {k} fill(s) of {WORKLOAD_CONTEXT} tokens prefilled during its decode: "
              f"+{1000 * stall:.1f} ms")
    check = result["check"]
    print(f"fitted: slot_stretch {result['slot_stretch']} per fill, kv_stretch "
          f"{result['kv_stretch']} per unit of KV pool share, prefill_s_per_token "
          f"{result['prefill_s_per_token']}")
    print(f"check ({check['fills']} fills of {check['context']} tokens, not fitted on): "
          f"measured stretch {100 * check['measured_stretch']:.1f}%, predicted "
          f"{100 * check['predicted_stretch']:.1f}%")
    return result


__all__ = ["measure", "run"]
