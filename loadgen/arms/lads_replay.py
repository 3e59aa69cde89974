"""One LADS run in virtual time: the real sender, lease provider and sim engine, one policy.

Every component is the production code (``services.delivery.sender.Sender``,
``services.engine_agent.leases.provider.LeaseProvider``, the sim backend and its block pool),
wired in one process with no gRPC, on a stdlib event loop whose clock is virtual
(``aiotools.VirtualClock``): sleeps of the paced link, the tool service and the engine's steps
advance the clock instantly, so a burst that takes minutes of engine time replays in about a
second, and every policy sees the same inputs. Python's own CPU time is not engine time; it is
reported separately (controller CPU seconds).

The harness follows LADS §5.1: initial model inputs enter the engine directly; each completed
tool result becomes a frame; complete receipt registers the continuation at once; latency is
measured from workflow arrival to its last model call's end.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiotools import VirtualClock

from loadgen.workloads.lads import LadsWorkflow, LadsWorkload
from services.common.values.generation import GenerationRequest, Sampling
from services.common.values.leases import ResultKey, digest
from services.delivery import Frame, Sender, make_policy
from services.engine_agent import (
    Allocated,
    Finished,
    LeaseProvider,
    LeaseSettings,
    SimBackend,
    get_preset,
    scaled_headroom,
)
from services.engine_agent.leases.state import token_ids

log = logging.getLogger(__name__)

MODEL = "lads-model"
ENGINE = "engine-0"
FRAMING_BYTES, WINDOW = 1028, 4


@dataclass(slots=True)
class Stages:
    """One continuation's timestamps (LADS §2.1): r ready, s commit, c receipt, n allocation,
    f completion."""

    r: float = math.nan
    s: float = math.nan
    c: float = math.nan
    n: float = math.nan
    f: float = math.nan
    cached_tokens: int = 0
    prompt_tokens: int = 0


@dataclass(slots=True)
class RunResult:
    """What one (workload, seed, preset, policy) run measured."""

    policy: str
    latencies: dict[str, float] = field(default_factory=dict)
    stages: dict[ResultKey, Stages] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    error: str = ""

    @property
    def failed(self) -> bool:
        """A run that did not finish every workflow (never averaged in)."""
        return bool(self.error)


class CohortService:
    """The cohort's common tool service: a round's results release together (LADS §5.1).

    Same-round calls of a cohort complete ``service_s`` after the last member starts; a member
    whose mates have not all started within ``limit_s`` of its own start is released alone at
    that limit (partial release).
    """

    def __init__(self, clock: Callable[[], float], cohorts: dict[int, int], service_s: float,
                 limit_s: float) -> None:
        self._clock, self._sizes = clock, cohorts
        self._service_s, self._limit_s = service_s, limit_s
        self._rounds: dict[tuple[int, int], tuple[list[float], asyncio.Event]] = {}

    async def call(self, cohort: int, turn: int) -> None:
        """Run one member's tool call of this round; returns at its release."""
        starts, full = self._rounds.setdefault((cohort, turn), ([], asyncio.Event()))
        start = self._clock()
        starts.append(start)
        if len(starts) == self._sizes[cohort]:
            full.set()
        try:
            await asyncio.wait_for(full.wait(), self._limit_s)
            release = max(starts) + self._service_s
        except TimeoutError:
            release = start + self._limit_s
        await asyncio.sleep(max(0.0, release - self._clock()))


class _Run:
    """The wiring of one run (see the module docstring) over any backend with a ``LeasePort``."""

    def __init__(self, workload: LadsWorkload, policy: str, backend: Any, *,
                 clock: Callable[[], float], headroom_blocks: int,
                 lease_settings: dict[str, Any] | None = None) -> None:
        self.clock = clock
        self.workload, self.result = workload, RunResult(policy)
        leases = make_policy(policy).leases  # the sender builds its own per engine
        self.backend = backend
        self.model = backend.info.model
        self.provider = LeaseProvider(
            backend, engine_id=ENGINE, tokenize=backend.tokenize, clock=clock,
            settings=LeaseSettings(**{"mode": leases, "headroom_blocks": headroom_blocks,
                                      **(lease_settings or {})}))
        self.sender = Sender(policy, link_bytes_per_s=workload.link_bytes_per_s,
                             framing_bytes=FRAMING_BYTES, window=WINDOW, clock=clock,
                             receive=self._receive,
                             inventory_listener=self.provider.sync_inventory)
        self.provider.subscribe(self.sender.observe)
        sizes: dict[int, int] = {}
        for wf in workload.workflows:
            sizes[wf.cohort] = sizes.get(wf.cohort, 0) + 1
        self.tools = CohortService(clock, sizes, workload.tool_service_s,
                                   workload.tool_limit_s)
        self.tasks: set[asyncio.Task[Any]] = set()

    async def run(self) -> RunResult:
        await self.provider.start()
        sender_task = asyncio.create_task(self.sender.run())
        t0 = self.clock()
        try:
            await asyncio.gather(*(self._workflow(wf, t0) for wf in self.workload.workflows))
        except Exception as exc:  # a failed run is reported, never averaged in
            log.exception("LADS run failed")
            self.result.error = f"{type(exc).__name__}: {exc}"
        finally:
            await self.sender.close()
            sender_task.cancel()
            await asyncio.gather(sender_task, return_exceptions=True)
            for task in list(self.tasks):
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            await self.provider.evaluate()  # closes the protection integral at the end
            await self.provider.close()
            self.result.stats = await self._stats()
        return self.result

    async def _workflow(self, wf: LadsWorkflow, t0: float) -> None:
        await asyncio.sleep(max(0.0, t0 + wf.arrival_s - self.clock()))
        arrived = self.clock()
        prompt = wf.history_text
        text = await self._generate(f"{wf.workflow_id}/0", prompt, wf.workflow_id)
        history = prompt + text
        for call in wf.calls[1:]:
            key = ResultKey(wf.workflow_id, call.turn)
            await self.provider.tool_started(key, history, call.tool)
            await self.tools.call(wf.cohort, call.turn)
            text = await self._deliver(key, history, call.observation, call.tool)
            history = history + call.observation + text
        self.result.latencies[wf.workflow_id] = self.clock() - arrived

    async def _deliver(self, key: ResultKey, history: str, observation: str, tool: str) -> str:
        payload = observation.encode()
        descriptor = await self.provider.ready(key, history, digest(payload))
        prompt = history + observation
        done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        stages = self.result.stages.setdefault(key, Stages())
        stages.r = self.clock()
        stages.prompt_tokens = len(await token_ids(self.backend.tokenize, prompt))
        frame = Frame.build(key, ENGINE, payload, ready_at=stages.r,
                            prompt_tokens=stages.prompt_tokens,
                            resident_blocks=descriptor.resident_blocks,
                            prefix_digest=descriptor.prefix_digest, tool=tool,
                            continuation=(prompt, done))
        self.sender.submit(frame)
        return await done

    async def _receive(self, frame: Frame) -> None:
        """Complete receipt: bind the lease and register the continuation in the engine now."""
        prompt, done = frame.continuation  # type: ignore[misc]
        key = frame.key
        stages = self.result.stages[key]
        stages.c = self.clock()
        times = self.sender.timeline.get(key)
        stages.s = times.commit if times is not None else math.nan
        request_id = f"{key.workflow_id}/{key.turn}"
        await self.provider.receipt(key, frame.payload_digest, frame.prefix_digest, request_id)
        gen = self.backend.generate(self._request(request_id, prompt, key.workflow_id))
        await anext(gen)  # Queued: the continuation is in the engine's FIFO
        task = asyncio.create_task(self._continue(key, gen, done))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _continue(self, key: ResultKey, gen: Any, done: asyncio.Future[str]) -> None:
        stages = self.result.stages[key]
        try:
            async for event in gen:
                if isinstance(event, Allocated):
                    stages.n = self.clock()
                    stages.cached_tokens = event.cached_prompt_tokens
                    await self.provider.allocated(key)
                elif isinstance(event, Finished):
                    stages.f = self.clock()
                    self.sender.completed(key, event.usage.completion_tokens)
                    self.result.outputs[f"{key.workflow_id}/{key.turn}"] = event.text
                    done.set_result(event.text)
        except Exception as exc:
            if not done.done():
                done.set_exception(exc)
            raise

    async def _generate(self, request_id: str, prompt: str, program: str) -> str:
        text = ""
        async for event in self.backend.generate(self._request(request_id, prompt, program)):
            if isinstance(event, Finished):
                text = event.text
        self.result.outputs[request_id] = text
        return text

    def _request(self, request_id: str, prompt: str, program: str) -> GenerationRequest:
        tokens = self.workload.output_tokens
        return GenerationRequest(request_id, self.model, prompt,
                                 Sampling(max_tokens=tokens, ignore_eos=True), program=program)

    async def _stats(self) -> dict[str, Any]:
        p, s = self.provider.stats, self.sender.stats
        released = p.added_refs == p.released_refs and not await self.backend.lease_refs()
        return {
            "protection_block_s": p.protection_block_s, "grants": p.grants,
            "handoffs_at_bind": p.handoffs_at_bind,
            "regrants": p.regrants, "expiries": p.expiries, "handoffs": p.handoffs,
            "revocations": p.revocations, "denials": p.denials, "added_refs": p.added_refs,
            "released_refs": p.released_refs, "grants_over_target": p.grants_over_target,
            "all_references_released": released, "pin_decisions": p.pin_decisions,
            "pinned_ttl_s": p.pinned_ttl_s, "pins_reused": p.pins_reused,
            "promotions": _stat(s, "promotions"),
            "controller_cpu_s": p.cpu_s + _stat(s, "decision_cpu_s"),
        }


def _stat(stats: dict[str, Any], name: str) -> float:
    """A sender statistic summed over its per-engine lanes."""
    return float(sum(getattr(lane, name) for lane in stats.values()))


@dataclass(frozen=True, slots=True)
class EngineVariant:
    """How the sim engine of one arm differs from the preset: its pool, a CPU tier, its queue
    order, and the lease settings the arm overrides."""

    #: KV blocks in the pool (None: the preset's; the no-eviction bound passes a pool that
    #: holds every history).
    kv_blocks: int | None = None
    #: Host memory for vLLM-style KV offloading, GiB (0: none).
    offload_gib: float = 0.0
    #: The sim's queue order (None: what the delivery policy's baseline assumes).
    queue_policy: str | None = None
    #: LeaseSettings fields to override (e.g. ``{"ttl_s": 4.0}`` for one point of the sweep).
    lease: tuple[tuple[str, Any], ...] = ()


async def run_on(backend: Any, workload: LadsWorkload, policy: str, *, headroom_blocks: int,
                 clock: Callable[[], float],
                 lease_settings: dict[str, Any] | None = None) -> RunResult:
    """One run on a started backend that implements ``LeasePort`` (the sim, embedded vLLM)."""
    return await _Run(workload, policy, backend, clock=clock, headroom_blocks=headroom_blocks,
                      lease_settings=lease_settings).run()


async def _virtual(workload: LadsWorkload, policy: str, preset: str,
                   setup: EngineVariant) -> RunResult:
    with VirtualClock().patch_loop():
        clock = asyncio.get_running_loop().time
        spec = get_preset(preset)
        if setup.kv_blocks is not None:
            spec = spec.with_overrides(num_kv_blocks=setup.kv_blocks)
        queue = setup.queue_policy or make_policy(policy).engine_queue
        backend = SimBackend(spec, time_scale=1.0, engine_id=ENGINE, model=MODEL, clock=clock,
                             queue_policy=queue,  # type: ignore[arg-type]
                             offload_gib=setup.offload_gib)
        await backend.start()
        try:
            # H is the paper's share of the preset's own pool, whatever pool this arm has
            result = await run_on(backend, workload, policy, clock=clock,
                                  headroom_blocks=scaled_headroom(get_preset(preset).kv_blocks),
                                  lease_settings=dict(setup.lease))
            engine = backend.engine
            result.stats["all_references_released"] &= all(b.ref_cnt == 0
                                                            for b in engine.pool.blocks)
            result.stats["preemptions"] = engine.scheduler.num_preemptions
            result.stats["evicted_blocks"] = engine.pool.evictions
            result.stats["engine_busy_s"] = engine.now()
            if engine.tier is not None:
                tier = engine.tier.stats
                result.stats.update(offload_loaded_blocks=tier.loaded_blocks,
                                    offload_load_s=tier.load_s, offload_dropped=tier.dropped)
            return result
        finally:
            await backend.close()


def run_policy(workload: LadsWorkload, policy: str, preset: str,
               setup: EngineVariant | None = None) -> RunResult:
    """One run of the sim with ``preset`` on a fresh stdlib event loop with a virtual clock."""
    loop = asyncio.SelectorEventLoop()  # the virtual clock patches a stdlib loop, not uvloop
    try:
        return loop.run_until_complete(_virtual(workload, policy, preset,
                                                setup or EngineVariant()))
    finally:
        loop.close()


__all__ = ["CohortService", "EngineVariant", "RunResult", "Stages", "run_on", "run_policy"]
