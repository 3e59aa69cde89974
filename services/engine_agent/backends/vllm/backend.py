"""``vllm`` backend: vLLM's ``AsyncLLM`` embedded in the engine agent, vLLM unmodified.

The engine core runs in its own process (vLLM's default); this process tokenizes, submits with
our request ids, streams deltas and aborts by id. Everything that needs the engine core's block
pool (prefix lookup, prefix leases, the exact first-allocation signal, the live load view) goes
through the utility methods that the dynbranch vLLM plugin (``plugins/vllm``) adds to
``EngineCore``; they run on the engine core's busy loop between steps. ``vllm`` and ``torch``
are imported only in ``start()``. It is a ``LeasePort`` through ``lease_port.VllmLeasePort``
(the provider's mechanism, with the plugin), and a ``PriorityPort`` (an adopted fill raised to
canonical priority) through the plugin's ``dynbranch_set_priority``, under the "priority"
scheduling policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.common.values.errors import (
    AlreadyExists,
    DynbranchError,
    FailedPrecondition,
    InvalidArgument,
    PayloadTooLarge,
    Unavailable,
    quoted,
)
from services.common.values.generation import (
    FinishReason,
    GenerationRequest,
    LoadReport,
    Priority,
    Usage,
)
from services.engine_agent.backend import (
    Allocated,
    BackendInfo,
    Finished,
    GenerationEvent,
    PrefixLookup,
    Queued,
    TokenDelta,
    finish_reason_named,
)
from services.engine_agent.backends.vllm.chat import VllmChat
from services.engine_agent.backends.vllm.lease_port import VllmLeasePort
from services.engine_agent.backends.vllm.leases import VllmLeases, allocated_event, settle
from services.engine_agent.backends.vllm.load import LoadState, load_tap
from services.engine_agent.backends.vllm.settings import (
    VllmSettings,
    default_root,
    engine_environment,
    engine_error,
    set_engine_environment,
    timings_from_metrics,
    validate_sampling,
)
from services.engine_agent.leases.port import Handoff, PoolState, ResidentPrefix

logger = logging.getLogger(__name__)

#: How long the first output may wait for the exact allocation signal before using a proxy.
_ALLOC_GRACE_S = 1.0


@dataclass(slots=True)
class _Active:
    request: GenerationRequest
    prompt_tokens: int
    #: The vLLM priority it is submitted at, or was moved to (``set_priority``).
    priority: int = 0
    engine_id: str = ""
    allocated: bool = False
    completion_tokens: int = 0
    finished: bool = False


class VllmBackend:
    """``EngineBackend`` over an embedded vLLM ``AsyncLLM`` with the dynbranch plugin."""

    def __init__(self, settings: VllmSettings) -> None:
        self.settings = settings
        self._llm: Any = None
        self._tokenizer: Any = None
        self._chat: VllmChat | None = None
        self._facts: dict[str, Any] = {}
        self._plugin = False
        self._active: dict[str, _Active] = {}
        self._load = LoadState()
        self._leases = VllmLeases(self)
        self._port = VllmLeasePort(self)
        self._poller: asyncio.Task[None] | None = None
        self._start_lock = asyncio.Lock()
        self._closed = False

    @classmethod
    def from_settings(cls, settings: Any) -> VllmBackend:
        """Build from ``EngineAgentSettings`` (``model_path`` names the local model folder)."""
        if not settings.model_path:
            raise InvalidArgument("model_path", "the vllm backend needs a local model folder")
        return cls(VllmSettings(
            model_path=settings.model_path, model=settings.model,
            max_num_seqs=settings.max_running or 16, num_gpu_blocks=settings.kv_blocks or None,
            block_size=settings.block_size or None,
            kv_events_endpoint=settings.kv_events_endpoint,
        ))

    # ---- lifecycle ------------------------------------------------------------------------

    @property
    def info(self) -> BackendInfo:
        """Static facts; engine facts once started."""
        f = self._facts
        return BackendInfo(
            backend="vllm", model=self.settings.served_name,
            max_model_len=int(f.get("max_model_len", self.settings.max_model_len)),
            block_size=int(f.get("block_size", self.settings.block_size or 0)),
            kv_blocks_total=int(f.get("num_blocks", 1)) - 1,
            max_running=int(f.get("max_num_seqs", self.settings.max_num_seqs)),
            leases_supported=self._plugin, tools_supported=True,
            extra={"engine": "vllm-asyncllm", "plugin": "loaded" if self._plugin else "missing",
                   "allocated_signal": "exact" if self._plugin else "first-output proxy",
                   "max_num_batched_tokens": str(f.get("max_num_batched_tokens", ""))},
        )

    async def start(self) -> None:
        """Start the engine core (about 20 s on CPU with the tiny model); idempotent."""
        async with self._start_lock:
            if self._llm is not None:
                return
            if self._closed:
                raise FailedPrecondition("backend is closed")
            self._llm = self._build_engine()
            self._tokenizer = self._llm.get_tokenizer()
            self._chat = VllmChat(self._tokenizer, self.settings.served_name)
            await self._probe_plugin()
            await self.refresh_load()
            self._poller = asyncio.create_task(self._poll(), name="vllm-load-poller")

    def _build_engine(self) -> Any:
        root = Path(self.settings.cache_root or default_root())
        set_engine_environment(engine_environment(self.settings, root))
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(**self._engine_kwargs())
        return AsyncLLM.from_engine_args(args, stat_loggers=[load_tap(self._load)])

    def _engine_kwargs(self) -> dict[str, Any]:
        s = self.settings
        kwargs: dict[str, Any] = {
            "model": s.model_path, "served_model_name": s.served_name,
            "max_model_len": s.max_model_len, "dtype": s.dtype, "enforce_eager": s.enforce_eager,
            "enable_prefix_caching": True, "max_num_seqs": s.max_num_seqs, "seed": s.seed,
            "disable_log_stats": False, "num_gpu_blocks_override": s.num_gpu_blocks,
            "scheduling_policy": s.scheduling_policy,
        }
        if s.block_size:
            kwargs["block_size"] = s.block_size
        if s.kv_events_endpoint:
            from vllm.config.kv_events import KVEventsConfig

            kwargs["kv_events_config"] = KVEventsConfig(
                enable_kv_cache_events=True, publisher="zmq", endpoint=s.kv_events_endpoint,
                replay_endpoint=s.kv_events_replay_endpoint or None, topic="kv-events")
        return {**kwargs, **s.extra_engine_args}

    async def _probe_plugin(self) -> None:
        try:
            self._facts = await self.call_utility("dynbranch_info")
            self._plugin = True
        except Exception as exc:  # noqa: BLE001 - degrade: no leases, proxy signals
            logger.warning("dynbranch vLLM plugin not loaded (%s); run scripts/install_vllm.sh "
                           "to register it; leases are disabled", exc)
            cfg = self._llm.vllm_config
            self._facts = {"max_num_batched_tokens": cfg.scheduler_config.max_num_batched_tokens,
                           "block_size": cfg.cache_config.block_size,
                           "num_blocks": (cfg.cache_config.num_gpu_blocks or 1),
                           "max_num_seqs": cfg.scheduler_config.max_num_seqs,
                           "max_model_len": cfg.model_config.max_model_len}

    async def close(self) -> None:
        """Abort everything, release every lease, stop the engine; idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._poller
        llm, self._llm = self._llm, None
        if llm is None:
            return
        with contextlib.suppress(Exception):
            if self._active:
                await llm.abort(list(self._active))
            if self._plugin:
                released = await llm.engine_core.call_utility_async("dynbranch_release_all")
                logger.info("released %d leased blocks at shutdown", released)
        self._leases.clear()
        llm.shutdown()

    async def reset_prefix_cache(self) -> bool:
        """Drop every cached prefix (between runs that share one started engine); False when
        the engine refuses: requests still run or leases hold blocks."""
        if self._llm is None:
            raise FailedPrecondition("backend is not started")
        done: bool = await self._llm.reset_prefix_cache()
        return done

    @property
    def running(self) -> bool:
        """Whether the engine is started and not closed."""
        return self._llm is not None

    @property
    def plugin_loaded(self) -> bool:
        """Whether the engine core has the dynbranch plugin's utilities (leases, exact signals)."""
        return self._plugin

    async def call_utility(self, name: str, *args: Any) -> Any:
        """Run one ``dynbranch_*`` utility on the engine core, between its steps."""
        if self._llm is None:
            raise Unavailable("engine is not running")
        return await self._llm.engine_core.call_utility_async(name, *args)

    # ---- load -----------------------------------------------------------------------------

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.settings.poll_interval_s)
            with contextlib.suppress(Exception):
                await self.refresh_load()

    async def refresh_load(self) -> LoadReport:
        """Read running, waiting and KV blocks straight from the scheduler (also sweeps leases)."""
        if self._plugin:
            view = await self.call_utility("dynbranch_load")
            self._load.running, self._load.waiting = view["running"], view["waiting"]
            self._load.kv_blocks_used = view["kv_blocks_used"]
            self._load.leased_blocks = view["leased_blocks"]
        return self.load()

    def _raised(self, active: _Active) -> bool:
        """A fill an adopting demand moved to canonical priority (it no longer counts as fill
        occupancy: nothing preempts it for canonical work)."""
        return (self.settings.scheduling_policy == "priority"
                and active.priority == self.settings.priority_of(False)
                and self.settings.priority_of(True) != active.priority)

    def load(self) -> LoadReport:
        """Latest load view: the scheduler's own counts, fill occupancy tracked here."""
        info, state = self.info, self._load
        fills = [a for a in self._active.values()
                 if a.request.priority == Priority.FILL and a.allocated and not self._raised(a)]
        size = max(info.block_size, 1)
        fill_blocks = sum(math.ceil((a.prompt_tokens + a.completion_tokens) / size) for a in fills)
        return LoadReport(
            running=state.running, waiting=state.waiting, max_running=info.max_running,
            kv_blocks_used=state.kv_blocks_used, kv_blocks_total=info.kv_blocks_total,
            fill_running=len(fills), fill_kv_blocks=fill_blocks, block_size=info.block_size,
            prefix_query_tokens=state.prefix_queries, prefix_hit_tokens=state.prefix_hits,
        )

    # ---- prefix residency and leases ----------------------------------------------------------

    def tokenize(self, prompt: str) -> list[int]:
        """Token ids exactly as this backend submits them."""
        if self._tokenizer is None:
            raise Unavailable("engine is not running")
        return list(self._tokenizer.encode(prompt, add_special_tokens=True))

    async def lookup_prefix(self, prompt: str) -> PrefixLookup:
        """Resident prefix as the scheduler would reuse it (whole blocks, before the last token)."""
        return await self._leases.lookup_prefix(prompt)

    async def lease_prefix(self, prompt_or_token_ids: str | Sequence[int], lease_id: str,
                           ttl_s: float) -> int:
        """Add one reference to each resident block of the prefix; blocks leased (0: none)."""
        return await self._leases.lease_prefix(prompt_or_token_ids, lease_id, ttl_s)

    async def release_lease(self, lease_id: str) -> int:
        """Drop exactly the references the lease added; blocks released (0: unknown/expired)."""
        return await self._leases.release_lease(lease_id)

    async def lease_stats(self) -> dict[str, int]:
        """Live leases and blocks, and lifetime grants, releases and expiries (engine side)."""
        return await self._leases.lease_stats()

    def leased_block_ids(self, lease_id: str) -> list[int]:
        """Engine block ids a lease holds (as granted)."""
        return self._leases.leased_block_ids(lease_id)

    async def block_refs(self, block_ids: Sequence[int]) -> list[int]:
        """Reference counts of engine blocks (diagnostics and tests)."""
        return await self._leases.block_refs(block_ids)

    # ---- LeasePort (the lease provider's mechanism; see lease_port) -------------------------

    @property
    def lease_block_size(self) -> int:
        """Tokens per KV block (the port reads it here: ``lease_port.PluginEngine``)."""
        return self.info.block_size

    async def resident(self, token_ids: Sequence[int]) -> ResidentPrefix:
        """The resident reusable prefix of ``token_ids`` (no references added)."""
        return await self._port.resident(token_ids)

    async def pool_state(self) -> PoolState:
        """Free blocks, queue lengths, the running limit and κ."""
        return await self._port.pool_state()

    async def acquire(self, lease_id: str, block_ids: Sequence[int], digest: str) -> bool:
        """Add one reference to each block iff all are still resident under ``digest``."""
        return await self._port.acquire(lease_id, block_ids, digest)

    async def release(self, lease_id: str) -> int:
        """Drop exactly the lease's references; blocks released (0: none held)."""
        return await self._port.release(lease_id)

    async def bind(self, lease_id: str, request_id: str) -> None:
        """Hand the lease to our request ``request_id`` at its first allocation."""
        await self._port.bind(lease_id, request_id)

    async def handoffs(self) -> list[Handoff]:
        """Handoffs since the last call, oldest first."""
        return await self._port.handoffs()

    async def lease_refs(self) -> dict[str, int]:
        """Blocks each live lease references."""
        return await self._port.lease_refs()

    # ---- PriorityPort (an adopted fill; see running.RunningFills) ---------------------------

    async def set_priority(self, request_id: str, priority: Priority) -> bool:
        """Move our queued or running request to ``priority`` in the engine core's scheduler;
        False when it is not live here, the plugin is not loaded, the policy is "fcfs", or the
        engine core does not have it (any more). A request not yet submitted is submitted at
        ``priority`` (or moved to it as soon as the engine core has it)."""
        active = self._active.get(request_id)
        if (active is None or active.finished or not self._plugin
                or self.settings.scheduling_policy != "priority"):
            return False
        active.priority = self.settings.priority_of(priority == Priority.FILL)
        if not active.engine_id:
            return True  # ``_stream`` submits at, or moves it to, ``active.priority``
        return await self._move(active)

    async def _move(self, active: _Active) -> bool:
        """Set the engine core's priority of a submitted request to ``active.priority``."""
        try:
            return bool(await self.call_utility("dynbranch_set_priority", active.engine_id,
                                                active.priority))
        except Exception as exc:  # noqa: BLE001 - the fill streams on at its old priority
            logger.warning("moving request %s to vLLM priority %d failed: %s",
                           active.request.request_id, active.priority, exc)
            return False

    # ---- generation -----------------------------------------------------------------------

    async def abort(self, request_id: str) -> bool:
        """Abort by our request id; slots and blocks are freed at the engine's next step."""
        active = self._active.get(request_id)
        if active is None or active.finished or self._llm is None:
            return False
        await self._llm.abort(request_id)
        return True

    def _admit(self, request: GenerationRequest) -> tuple[list[int], Any]:
        if self._llm is None:
            raise Unavailable("engine is not running")
        if not request.request_id:
            raise InvalidArgument("request_id", "must not be empty")
        if request.request_id in self._active:
            raise AlreadyExists(f"request {quoted(request.request_id)} is already running")
        if request.model and request.model != self.settings.served_name:
            raise InvalidArgument("model", f"unknown model {quoted(request.model)}; serving "
                                  f"{self.settings.served_name!r}")
        validate_sampling(request.sampling)
        if request.chat is not None and self._chat is not None:
            ids = self._chat.render(request.chat)  # the model's own chat template, with tools
        else:
            ids = self.tokenize(request.prompt)
        if not ids:
            raise InvalidArgument("prompt", "must not be empty")
        limit = self.info.max_model_len
        if len(ids) + request.sampling.max_tokens > limit:
            raise PayloadTooLarge("prompt", f"{len(ids)} prompt tokens + "
                                  f"{request.sampling.max_tokens} max_tokens exceed {limit}")
        return ids, self._sampling_params(request)

    def _sampling_params(self, request: GenerationRequest) -> Any:
        from vllm.sampling_params import RequestOutputKind, SamplingParams

        s, chat = request.sampling, request.chat
        extra: dict[str, Any] = {}
        if chat is not None and self._chat is not None:
            extra["structured_outputs"] = self._chat.structured_outputs(chat)
            if chat.may_call:  # tool-call markers may be special tokens (as vLLM's hermes)
                extra["skip_special_tokens"] = False
        return SamplingParams(
            n=1, max_tokens=s.max_tokens, temperature=s.temperature, top_p=s.top_p,
            top_k=s.top_k, seed=s.seed, stop=list(s.stop) or None, ignore_eos=s.ignore_eos,
            output_kind=RequestOutputKind.DELTA, **extra,
        )

    def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        """Submit and stream Queued, Allocated, TokenDeltas and Finished."""
        ids, params = self._admit(request)
        active = _Active(request=request, prompt_tokens=len(ids),
                         priority=self.settings.priority_of(request.priority == Priority.FILL))
        self._active[request.request_id] = active
        return self._stream(active, ids, params)

    async def _stream(self, active: _Active, ids: list[int], params: Any
                      ) -> AsyncIterator[GenerationEvent]:
        rid, wall0 = active.request.request_id, time.time()
        q, alloc, done = None, None, False
        try:
            yield Queued(prompt_tokens=len(ids), queue_position=self._load.waiting)
            submitted = active.priority
            q = await self._llm.add_request(rid, self._engine_input(ids), params,
                                            priority=submitted)
            active.engine_id = q.request_id
            alloc = self._leases.wait_allocated(q.request_id)
            if active.priority != submitted:  # moved while it was being submitted
                await self._move(active)
            async for event in self._drain(active, q, alloc, wall0):
                done = isinstance(event, Finished)
                yield event
        except DynbranchError:
            raise
        except Exception as exc:
            raise engine_error(exc) from exc
        finally:
            self._active.pop(rid, None)
            await self._cleanup(active, q, alloc, done)

    def _engine_input(self, ids: list[int]) -> Any:
        """Token ids through vLLM's renderer (what it wants since 0.2x), else a TokensPrompt."""
        prompt = {"prompt_token_ids": ids}
        render = getattr(getattr(self._llm, "renderer", None), "render_cmpl", None)
        return render([prompt])[0] if render is not None else prompt

    async def _drain(self, active: _Active, q: Any, exact: asyncio.Future[Any] | None,
                     wall0: float) -> AsyncIterator[GenerationEvent]:
        """Engine outputs as events; the exact allocation signal is merged in as it arrives."""
        getter: asyncio.Future[Any] | None = None
        texts: list[str] = []
        while True:
            if exact is not None:
                getter = getter or asyncio.ensure_future(q.get())
                await asyncio.wait({getter, exact}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done() and not exact.done():
                    await settle(exact, _ALLOC_GRACE_S)  # output first: a short grace
                if exact.done():
                    event = allocated_event(exact, wall0)
                    if event is not None:
                        active.allocated = True
                        yield event
                if exact.done() or getter.done():
                    exact = None  # a signal later than the grace is left to the proxy
                if not getter.done():
                    continue
            out = (await getter) if getter is not None else (q.get_nowait() or await q.get())
            getter = None
            completion = out.outputs[0]
            if not active.allocated and completion.token_ids:
                active.allocated = True  # proxy: the first output, late by the prefill
                yield Allocated(int(out.num_cached_tokens or 0), time.time() - wall0)
            if completion.token_ids or completion.text:
                active.completion_tokens += len(completion.token_ids)
                texts.append(completion.text)
                yield TokenDelta(completion.text, len(completion.token_ids))
            if out.finished:
                active.finished = True
                yield self._finished(active, out, "".join(texts), wall0)
                return

    def _finished(self, active: _Active, out: Any, text: str, wall0: float) -> Finished:
        completion = out.outputs[0]
        reason = finish_reason_named(str(completion.finish_reason))
        usage = Usage(active.prompt_tokens, int(out.num_cached_tokens or 0),
                      active.completion_tokens)
        timings = timings_from_metrics(out.metrics, time.time() - wall0)
        # vLLM's stop_reason: the stop string matched, a stop token id, or None (EOS).
        stop = completion.stop_reason if isinstance(completion.stop_reason, str) else ""
        chat = active.request.chat
        if chat is None or self._chat is None or reason is FinishReason.ABORT:
            return Finished(reason, text, usage, timings, stop_string=stop)
        content, calls = self._chat.parse(chat, text)
        if calls:
            reason, stop = FinishReason.STOP, ""
        return Finished(reason, content, usage, timings, calls, stop)

    async def _cleanup(self, active: _Active, q: Any, alloc: Any, done: bool) -> None:
        if q is not None and not done and self._llm is not None:
            with contextlib.suppress(Exception):
                await self._llm.abort(q.request_id, internal=True)
        if alloc is not None and not alloc.done():
            alloc.cancel()
            if self._llm is not None and active.engine_id:
                with contextlib.suppress(Exception):
                    await self._leases.forget(active.engine_id)
        if q is not None:
            q.close()


__all__ = ["VllmBackend", "VllmSettings", "engine_environment", "validate_sampling"]
