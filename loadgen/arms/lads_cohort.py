"""The small LADS cohort run on real engines (the embedded vLLM in
tests/real_engine/test_lads_cohort.py and ``scripts/gpu_check.sh``, a ``vllm serve`` over the
lease channel in test_openai_server.py), the port wrapper that records what the lease provider
did, and the checks every such run must pass.

Four workflows of three calls in one tool cohort, histories of three to five 128-token blocks,
observations of 200–600 bytes over a 4,000 B/s return link. On a pool of 24 blocks the four
growing histories do not all stay cached, and a headroom of 2 blocks is below the largest
continuation's new blocks, so leases can hold blocks a waiting continuation needs: the plugin
reports what the head waiting request lacks (``PoolState.blocked_blocks``) and the provider
revokes before that allocation instead of letting the continuation wait out the lease lifetime.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from loadgen.arms.lads_replay import RunResult
from loadgen.workloads.lads import LadsCall, LadsWorkflow, LadsWorkload
from services.common.values.leases import ResultKey
from services.engine_agent.leases.port import Handoff

NUM_BLOCKS = 24
BLOCK = 128
HEADROOM_BLOCKS = 2
#: ``long_prompt`` sizes giving 458, 560, 632 and 745 tokens: 3, 4, 4 and 5 whole blocks.
HISTORY_SIZES = (540, 620, 700, 780)
#: Observation bytes of turns 1 and 2, per workflow.
OBSERVATION_BYTES = ((240, 520), (580, 300), (360, 460), (200, 600))


def long_prompt(seed: int, approx_tokens: int) -> str:
    """Distinct, deterministic text of roughly ``approx_tokens`` tokens for the tiny tokenizer."""
    words = []
    i = 0
    while len(words) < approx_tokens:
        words.append(f"item_{seed}_{i} = compute({i} * {seed} + {i % 7})")
        i += 1
    return "\n".join(words)[: approx_tokens * 2]  # about 2 characters a token here


def observation(workflow: int, turn: int, size: int) -> str:
    """Distinct tool output of ``size`` bytes."""
    lines = (f"out[{workflow}.{turn}.{i}] = tool_{workflow}({i}, {turn * 7 + i})"
             for i in range(64))
    return "\n".join(lines)[:size]


def cohort_workload() -> LadsWorkload:
    """Four workflows of three calls, one cohort, arriving 50 ms apart."""
    workflows = []
    for i, (size, observed) in enumerate(zip(HISTORY_SIZES, OBSERVATION_BYTES, strict=True)):
        calls = [LadsCall(0, "", "", 0.0)] + [
            LadsCall(turn, "bash", observation(i, turn, observed[turn - 1]), 0.0)
            for turn in (1, 2)]
        # history_tokens counts sim tokens, which run_on never reads: the approximate size will do
        workflows.append(LadsWorkflow(f"cohort-w{i}", 0.05 * i, 0, long_prompt(100 + i, size),
                                      size, tuple(calls)))
    return LadsWorkload("cohort-real", 0, tuple(workflows), cohort_size=4, tool_service_s=0.05,
                        tool_limit_s=60.0, output_tokens=8, context_limit=2048,
                        link_bytes_per_s=4000.0, sources=())


def continuation_key(request_id: str) -> ResultKey:
    """The result key of a continuation's request id (``{workflow}/{turn}``)."""
    workflow, turn = request_id.rsplit("/", 1)
    return ResultKey(workflow, int(turn))


class RecordingPort:
    """The backend, recording the blocks of every granted lease and every handoff drained;
    ``tokenize`` replaces the backend's (``run_on`` sizes frames with a synchronous one).

    Handoffs are drained from the plugin's own records (``call_utility``), which also say
    whether a lease met its continuation at the first allocation or only at bind (``at_bind``:
    granted in the moment between the engine allocating the continuation and the provider
    hearing of it, and released at once, having protected nothing).
    """

    def __init__(self, backend: Any, tokenize: Callable[[str], list[int]] | None = None) -> None:
        self._backend = backend
        self.tokenize = tokenize or backend.tokenize
        self.leased: dict[str, int] = {}
        self.handed_off: list[Handoff] = []
        self.at_bind: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    async def acquire(self, lease_id: str, block_ids: Sequence[int], digest: str) -> bool:
        ok = await self._backend.acquire(lease_id, block_ids, digest)
        if ok:
            self.leased[lease_id] = len(block_ids)
        return ok

    async def handoffs(self) -> list[Handoff]:
        raw = await self._backend.call_utility("dynbranch_handoffs")
        drained = [Handoff(h["lease_id"], h["request_id"], float(h["t"]), bool(h["owned"]),
                           bool(h.get("at_bind", False))) for h in raw]
        self.at_bind |= {h["lease_id"] for h in raw if h.get("at_bind")}
        self.handed_off += drained
        return drained


@dataclass(frozen=True)
class Runs:
    """The lads and fifo runs and what the engine reported around them."""

    lads: RunResult
    fifo: RunResult
    port: RecordingPort
    refs_before: list[int]
    refs_after: list[int]
    lease_refs_after: dict[str, int]
    lads_s: float = 0.0
    fifo_s: float = 0.0


def check_lads_run(runs: Runs) -> None:
    """The lads run finished and released every reference it added (engine ref counts too)."""
    lads = runs.lads
    assert not lads.failed, lads.error
    assert len(lads.latencies) == 4 and len(lads.stages) == 8
    assert lads.stats["all_references_released"]
    assert lads.stats["added_refs"] == lads.stats["released_refs"] > 0
    assert runs.lease_refs_after == {}
    assert runs.refs_after == runs.refs_before


def check_handoffs(runs: Runs) -> None:
    """Leases were granted and handed off to their own continuations at their first
    allocation, most of them."""
    stats, port = runs.lads.stats, runs.port
    assert stats["grants"] >= 1 and stats["handoffs"] >= 1
    owned = [h for h in port.handed_off if h.owned]
    assert len(owned) == stats["handoffs"]
    assert {continuation_key(h.request_id) for h in owned} <= set(runs.lads.stages)
    at_allocation = [h for h in owned if h.lease_id not in port.at_bind]
    assert len(at_allocation) >= len(runs.lads.stages) // 2  # most, not one lucky one


def handed_off_lines(runs: Runs) -> list[str]:
    """One line per handoff: blocks leased, owned, tokens its continuation found cached."""
    port, stages = runs.port, runs.lads.stages
    return [f"{h.request_id}: leased {port.leased[h.lease_id]} blocks, owned={h.owned}, "
            f"{'at bind' if h.lease_id in port.at_bind else 'at first allocation'}, cached "
            f"{stages[continuation_key(h.request_id)].cached_tokens} tokens"
            for h in port.handed_off]


def check_leased_prefixes_hit(runs: Runs) -> None:
    """Every continuation a lease was handed off to at its first allocation reused (at least)
    its whole leased prefix."""
    for h in runs.port.handed_off:
        if h.owned and h.lease_id not in runs.port.at_bind:
            cached = runs.lads.stages[continuation_key(h.request_id)].cached_tokens
            assert cached >= max(runs.port.leased[h.lease_id] * BLOCK, BLOCK), h


def check_outputs_equal_fifo(runs: Runs) -> None:
    """Greedy continuations answer the same whatever the cache held."""
    assert not runs.fifo.failed, runs.fifo.error
    assert runs.fifo.stats["grants"] == 0
    assert runs.lads.outputs.keys() == runs.fifo.outputs.keys()
    assert len(runs.lads.outputs) == 12 and all(runs.lads.outputs.values())
    assert runs.lads.outputs == runs.fifo.outputs


__all__ = ["BLOCK", "HEADROOM_BLOCKS", "NUM_BLOCKS", "RecordingPort", "Runs", "check_handoffs",
           "check_lads_run", "check_leased_prefixes_hit", "check_outputs_equal_fifo",
           "cohort_workload", "continuation_key", "handed_off_lines", "long_prompt", "observation"]
