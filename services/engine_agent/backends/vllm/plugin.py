"""vLLM general plugin: prefix residency, prefix leases and first-allocation signals.

vLLM loads it through the ``vllm.general_plugins`` entry point (``pyproject.toml``) in every one
of its processes; ``register()`` adds ``dynbranch_*`` utility methods to ``EngineCore``. The
parent (``VllmBackend``) calls them with ``engine_core.call_utility_async(name, *args)``; the
engine core runs them on its busy-loop thread between steps, so they may read and change the
block pool without locks. vLLM itself stays unmodified.

Rules every hook keeps, because an exception escaping a scheduler hook kills the engine:

* every hook is guarded and logs instead of raising;
* a lease records exactly the blocks it touched and frees exactly those, once, tail first;
* leases expire (TTL) and are swept at every call, every step and on the parent's timer;
  ``dynbranch_release_all`` and engine shutdown release every one of them.

The ``LeasePort`` utilities (``dynbranch_resident``, ``_acquire``, ``_bind``, ``_handoffs``,
``_lease_refs``, ``_pool_state``; parent side in ``lease_port``) name a prefix by block ids and a
digest of the blocks' own hashes, so an acquire fails closed once any block was evicted or reused.
They use KV-cache group 0 only: right for the single-group (full-attention) models we run.

Arguments and results cross processes as msgpack: only ints, floats, strings, lists and dicts.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from services.common.leases import KAPPA_CHUNK_TOKENS, prefix_digest

logger = logging.getLogger(__name__)

#: Allocation records kept for requests whose waiter has not asked yet.
_MAX_ALLOC_RECORDS = 8192
_STATE_ATTR = "_dynbranch_state"
#: Handoff records kept for a parent that has not drained them yet.
_MAX_HANDOFFS = 4096
#: κ before the first measurement, its EMA weight, the longest gap taken for a step, and the
#: fewest tokens a measured step had (see ``_measure_kappa``).
_KAPPA_DEFAULT_S = 0.05
_KAPPA_EMA = 0.2
_KAPPA_MAX_GAP_S = 10.0
_KAPPA_MIN_TOKENS = KAPPA_CHUNK_TOKENS // 2


@dataclass(slots=True)
class _Lease:
    blocks: list[list[Any]]  # per KV-cache group, prefix order
    expires_at: float
    tokens: int
    bound: str | None = None  # request id (ours, or AsyncLLM's renamed one) it hands off to


@dataclass(slots=True)
class _State:
    """Plugin state of one engine core (lives in the engine-core process)."""

    leases: dict[str, _Lease] = field(default_factory=dict)
    allocated: OrderedDict[str, dict[str, float]] = field(default_factory=OrderedDict)
    waiters: dict[str, Future] = field(default_factory=dict)
    granted: int = 0
    released: int = 0
    expired: int = 0
    hooked: bool = False
    bound: dict[str, str] = field(default_factory=dict)  # request id -> lease id
    handoffs: list[dict[str, Any]] = field(default_factory=list)
    kappa_s: float = _KAPPA_DEFAULT_S
    kappa_samples: int = 0
    last_step: tuple[float, int, list[str]] | None = None  # (t, tokens, request ids)


def _state(core: Any) -> _State:
    st = getattr(core, _STATE_ATTR, None)
    if st is None:
        st = _State()
        setattr(core, _STATE_ATTR, st)
    if not st.hooked:
        _install_schedule_hook(core, st)
    return st


# ---- hashing and lookup -------------------------------------------------------------------


def _manager(core: Any) -> Any:
    return core.scheduler.kv_cache_manager


def _block_size(core: Any) -> int:
    return int(_manager(core).block_pool.hash_block_size)


def _block_hashes(core: Any, token_ids: list[int]) -> list[Any]:
    """Chained block hashes of the full blocks of ``token_ids``, as the scheduler computes them."""
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import hash_block_tokens

    hash_fn = get_hash_fn_by_name(core.vllm_config.cache_config.prefix_caching_hash_algo)
    size = _block_size(core)
    hashes: list[Any] = []
    parent = None
    for start in range(0, len(token_ids) - size + 1, size):
        parent = hash_block_tokens(hash_fn, parent, token_ids[start:start + size], None)
        hashes.append(parent)
    return hashes


def _resident(core: Any, token_ids: list[int], max_len: int) -> tuple[tuple[list[Any], ...], int]:
    """Resident prefix blocks per group and their token count, capped at ``max_len``."""
    manager = _manager(core)
    if max_len <= 0 or not manager.enable_caching:
        return (), 0
    blocks, hit_len, _ = manager.coordinator.find_longest_cache_hit(
        _block_hashes(core, token_ids), max_len
    )
    return blocks, int(hit_len)


# ---- leases -------------------------------------------------------------------------------


def _release(core: Any, st: _State, lease_id: str) -> int:
    lease = st.leases.pop(lease_id, None)
    if lease is None:
        return 0
    _unbind(st, lease_id, lease)
    pool = _manager(core).block_pool
    for group in lease.blocks:
        # Never underflow a count: a block at 0 was not ours to free (it cannot happen while we
        # hold a reference, but a bug here must not corrupt the engine's pool).
        safe = [b for b in reversed(group) if b.ref_cnt > 0]
        if len(safe) != len(group):
            logger.error("lease %s: %d blocks already at ref 0", lease_id, len(group) - len(safe))
        pool.free_blocks(safe)  # tail first: the prefix's end is evicted before its start
    st.released += 1
    return sum(len(g) for g in lease.blocks)


def _unbind(st: _State, lease_id: str, lease: _Lease) -> str | None:
    """Drop a lease's binding; the request id it was bound under (None: it was not)."""
    bound_as, lease.bound = lease.bound, None
    if bound_as is not None and st.bound.get(bound_as) == lease_id:
        del st.bound[bound_as]
    return bound_as


def _sweep(core: Any, st: _State, now: float | None = None) -> int:
    now = time.monotonic() if now is None else now
    expired = [lid for lid, lease in st.leases.items() if lease.expires_at <= now]
    for lid in expired:
        _release(core, st, lid)
    st.expired += len(expired)
    return len(expired)


def dynbranch_info(self: Any) -> dict[str, Any]:
    """Static facts of the engine core (also installs the scheduler hook)."""
    _state(self)
    manager = _manager(self)
    cfg = self.vllm_config
    return {
        "block_size": _block_size(self),
        "num_blocks": int(manager.block_pool.num_gpu_blocks),
        "max_num_seqs": int(cfg.scheduler_config.max_num_seqs),
        "max_num_batched_tokens": int(cfg.scheduler_config.max_num_batched_tokens),
        "max_model_len": int(cfg.model_config.max_model_len),
        "enable_caching": bool(manager.enable_caching),
        "hash_algo": str(cfg.cache_config.prefix_caching_hash_algo),
    }


def dynbranch_lookup(self: Any, token_ids: list[int]) -> dict[str, int]:
    """Resident tokens of a prompt, as the scheduler would reuse them (stops before the last)."""
    st = _state(self)
    _sweep(self, st)
    _, hit = _resident(self, list(token_ids), len(token_ids) - 1)
    return {"prompt_tokens": len(token_ids), "resident_tokens": hit,
            "block_size": _block_size(self)}


def dynbranch_lease(self: Any, lease_id: str, token_ids: list[int], ttl_s: float) -> dict[str, Any]:
    """Add one reference to each resident full block of ``token_ids``; renew if held."""
    st = _state(self)
    _sweep(self, st)
    now = time.monotonic()
    held = st.leases.get(lease_id)
    if held is not None:
        held.expires_at = now + max(float(ttl_s), 0.0)
        return _lease_view(held, renewed=True)
    blocks, hit = _resident(self, list(token_ids), len(token_ids))
    groups = [list(g) for g in blocks]
    if not hit or not any(groups):
        return {"blocks": 0, "tokens": 0, "block_ids": [], "renewed": False}
    _manager(self).block_pool.touch([b for g in groups for b in g])
    lease = _Lease(blocks=groups, expires_at=now + max(float(ttl_s), 0.0), tokens=hit)
    st.leases[lease_id] = lease
    st.granted += 1
    return _lease_view(lease, renewed=False)


def _lease_view(lease: _Lease, renewed: bool) -> dict[str, Any]:
    return {
        "blocks": sum(len(g) for g in lease.blocks),
        "tokens": lease.tokens,
        "block_ids": [int(b.block_id) for g in lease.blocks for b in g],
        "renewed": renewed,
    }


def dynbranch_release(self: Any, lease_id: str) -> int:
    """Drop exactly the references a lease added; 0 when unknown (already released or expired)."""
    st = _state(self)
    released = _release(self, st, lease_id)
    _sweep(self, st)
    return released


def dynbranch_release_all(self: Any) -> int:
    """Release every lease (shutdown, restart of the agent); returns blocks released."""
    st = _state(self)
    return sum(_release(self, st, lid) for lid in list(st.leases))


def dynbranch_sweep(self: Any) -> int:
    """Release expired leases (the parent calls this on a timer)."""
    return _sweep(self, _state(self))


def dynbranch_lease_stats(self: Any) -> dict[str, int]:
    """Counts of live leases, their blocks, and lifetime grants, releases and expiries."""
    st = _state(self)
    _sweep(self, st)
    return {
        "leases": len(st.leases),
        "blocks": sum(len(g) for lease in st.leases.values() for g in lease.blocks),
        "granted": st.granted,
        "released": st.released,
        "expired": st.expired,
    }


def dynbranch_block_refs(self: Any, block_ids: list[int]) -> list[int]:
    """Reference counts of blocks (tests check that they return to their start)."""
    blocks = _manager(self).block_pool.blocks
    return [int(blocks[i].ref_cnt) for i in block_ids]


def dynbranch_load(self: Any) -> dict[str, Any]:
    """Live scheduler view: running, waiting, KV blocks used and leased."""
    st = _state(self)
    _sweep(self, st)
    pool = _manager(self).block_pool
    running, waiting = self.scheduler.get_request_counts()
    usable = pool.num_gpu_blocks - 1  # the null block is never free
    return {
        "running": int(running),
        "waiting": int(waiting),
        "kv_blocks_used": int(usable - pool.get_num_free_blocks()),
        "kv_blocks_total": int(usable),
        "leased_blocks": sum(len(g) for lease in st.leases.values() for g in lease.blocks),
        "t": time.time(),
    }


# ---- first allocation ---------------------------------------------------------------------


def dynbranch_wait_allocated(self: Any, request_id: str) -> Any:
    """First positive-token allocation of an engine request id: at once, or a Future.

    The engine delays its reply until the Future resolves, which the scheduler hook does right
    after the step that first scheduled the request (before its forward pass).
    """
    st = _state(self)
    record = st.allocated.pop(request_id, None)
    if record is not None:
        return record
    if request_id not in self.scheduler.requests:
        return None  # finished or aborted before it was ever scheduled, or unknown
    fut: Future = Future()
    st.waiters[request_id] = fut
    return fut


def dynbranch_forget(self: Any, request_id: str) -> bool:
    """Stop waiting for a request (it finished or was aborted); resolves its waiter with None."""
    st = _state(self)
    st.allocated.pop(request_id, None)
    fut = st.waiters.pop(request_id, None)
    if fut is not None and not fut.done():
        fut.set_result(None)
        return True
    return False


def _on_scheduled(core: Any, st: _State, output: Any) -> None:
    """The schedule hook's parts, each guarded alone: one failing must not skip the others."""
    for part in (_signal_allocations, _hand_off_scheduled, _measure_kappa, _sweep_after_step):
        try:
            part(core, st, output)
        except Exception:  # an escaping exception would kill the engine core
            logger.exception("dynbranch schedule hook: %s failed", part.__name__)


def _signal_allocations(core: Any, st: _State, output: Any) -> None:
    now = time.time()
    for new in output.scheduled_new_reqs:
        record = {"cached_tokens": int(new.num_computed_tokens), "t": now}
        fut = st.waiters.pop(new.req_id, None)
        if fut is not None:
            if not fut.done():
                fut.set_result(record)
            continue
        st.allocated[new.req_id] = record
        while len(st.allocated) > _MAX_ALLOC_RECORDS:
            st.allocated.popitem(last=False)


def _sweep_after_step(core: Any, st: _State, output: Any) -> None:
    if st.leases:
        _sweep(core, st)


def _install_schedule_hook(core: Any, st: _State) -> None:
    scheduler = core.scheduler
    original = scheduler.schedule

    def schedule(*args: Any, **kwargs: Any) -> Any:
        output = original(*args, **kwargs)
        try:
            _on_scheduled(core, st, output)
        except Exception:  # an escaping exception would kill the engine core
            logger.exception("dynbranch schedule hook failed")
        return output

    scheduler.schedule = schedule
    st.hooked = True


# ---- the lease port: digest-checked leases and allocation-time handoffs --------------------


def _digest(blocks: list[Any]) -> str:
    """``prefix_digest`` of the blocks' own hashes (bytes; stable within this engine process)."""
    return prefix_digest(b.block_hash for b in blocks)


def dynbranch_resident(self: Any, token_ids: list[int]) -> dict[str, Any]:
    """Resident reusable prefix (group 0): block ids, the free ones, and their digest."""
    st = _state(self)
    _sweep(self, st)
    blocks, _ = _resident(self, list(token_ids), len(token_ids) - 1)
    group = list(blocks[0]) if blocks else []
    return {"block_ids": [int(b.block_id) for b in group],
            "free": [int(b.block_id) for b in group if b.ref_cnt == 0], "digest": _digest(group)}


def _held_blocks(pool: Any, block_ids: list[int], digest: str) -> list[Any] | None:
    """The blocks iff every id is a real cached block and their hashes match ``digest``."""
    ids = [int(i) for i in block_ids]
    if not ids or len(set(ids)) != len(ids) or not all(0 < i < pool.num_gpu_blocks for i in ids):
        return None
    blocks = [pool.blocks[i] for i in ids]
    if any(b.is_null or b.block_hash is None for b in blocks) or _digest(blocks) != digest:
        return None
    return blocks


def dynbranch_acquire(self: Any, lease_id: str, block_ids: list[int], digest: str,
                      safety_ttl_s: float = 60.0) -> bool:
    """All or nothing: one reference on each block iff all still hold the prefix ``digest``.

    ``safety_ttl_s`` only bounds a lost release; the provider releases long before.
    """
    st = _state(self)
    _sweep(self, st)
    if lease_id in st.leases or safety_ttl_s <= 0:
        return False
    pool = _manager(self).block_pool
    blocks = _held_blocks(pool, block_ids, digest)
    if blocks is None:
        return False
    pool.touch(blocks)
    st.leases[lease_id] = _Lease(blocks=[blocks], tokens=len(blocks) * _block_size(self),
                                 expires_at=time.monotonic() + float(safety_ttl_s))
    st.granted += 1
    return True


def dynbranch_bind(self: Any, lease_id: str, request_id: str) -> bool:
    """Hand a lease to ``request_id`` (or its renamed ``{id}-xxxxxxxx``) at its first allocation.

    A request already holding blocks is checked now. False when the lease is not held.
    """
    st = _state(self)
    lease = st.leases.get(lease_id)
    if lease is None:
        return False
    _unbind(st, lease_id, lease)
    displaced = st.leases.get(st.bound.get(request_id, ""))
    if displaced is not None:
        displaced.bound = None  # one lease per request: the latest binding wins
    lease.bound, st.bound[request_id] = request_id, lease_id
    engine_id = _engine_request_id(self, request_id)
    if engine_id is not None and any(_request_blocks(self, engine_id)):
        _hand_off(self, st, lease_id, engine_id)
    return True


def _engine_request_id(core: Any, request_id: str) -> str | None:
    requests = core.scheduler.requests
    if request_id in requests:
        return request_id
    prefix, size = request_id + "-", len(request_id) + 9
    return next((rid for rid in requests if len(rid) == size and rid.startswith(prefix)), None)


def _bound_key(st: _State, engine_id: str) -> str | None:
    """The id a lease was bound under: the engine id itself, or ours before AsyncLLM's suffix."""
    if engine_id in st.bound:
        return engine_id
    if len(engine_id) > 9 and engine_id[-9] == "-" and engine_id[:-9] in st.bound:
        return engine_id[:-9]
    return None


def _request_blocks(core: Any, engine_id: str) -> tuple[list[Any], ...]:
    return _manager(core).coordinator.get_blocks(engine_id)


def _hand_off(core: Any, st: _State, lease_id: str, engine_id: str) -> None:
    """Release the lease iff the request references every leased block; record the outcome."""
    lease = st.leases[lease_id]
    bound_as = _unbind(st, lease_id, lease)
    groups = _request_blocks(core, engine_id)
    owned = len(groups) >= len(lease.blocks) and all(
        {b.block_id for b in leased} <= {b.block_id for b in groups[i]}
        for i, leased in enumerate(lease.blocks))
    if owned:
        _release(core, st, lease_id)
    else:
        logger.warning("lease %s: request %s lacks leased blocks; kept", lease_id, engine_id)
    st.handoffs.append({"lease_id": lease_id, "request_id": bound_as or engine_id,
                        "t": time.time(), "owned": owned})
    del st.handoffs[:-_MAX_HANDOFFS]


def _hand_off_scheduled(core: Any, st: _State, output: Any) -> None:
    if not st.bound:
        return
    for engine_id, tokens in output.num_scheduled_tokens.items():
        key = _bound_key(st, engine_id) if tokens > 0 else None
        if key is not None:
            _hand_off(core, st, st.bound[key], engine_id)


def dynbranch_handoffs(self: Any) -> list[dict[str, Any]]:
    """Handoffs since the last call, oldest first."""
    st = _state(self)
    out, st.handoffs = st.handoffs, []
    return out


def dynbranch_lease_refs(self: Any) -> dict[str, int]:
    """Blocks each live lease references."""
    st = _state(self)
    _sweep(self, st)
    return {lid: sum(len(g) for g in lease.blocks) for lid, lease in st.leases.items()}


def dynbranch_pool_state(self: Any) -> dict[str, Any]:
    """Free and usable blocks, queue lengths, the running limit and κ."""
    st = _state(self)
    _sweep(self, st)
    pool = _manager(self).block_pool
    running, waiting = self.scheduler.get_request_counts()
    return {"free_blocks": int(pool.get_num_free_blocks()),
            "total_blocks": int(pool.num_gpu_blocks) - 1,  # the null block is never free
            "waiting": int(waiting), "running": int(running),
            "max_running": int(self.scheduler.max_num_running_reqs), "kappa_s": st.kappa_s}


def _measure_kappa(core: Any, st: _State, output: Any) -> None:
    """κ (LADS §3.4): an EMA of one step's wall time scaled to a 512-token chunk.

    A step's time is the gap from its ``schedule()`` to the next one that scheduled tokens,
    scaled by ``KAPPA_CHUNK_TOKENS / tokens`` of the earlier step. Only steps of at least
    ``_KAPPA_MIN_TOKENS`` count: a decode step's few tokens cost mostly the fixed per-step
    overhead, and scaling them to 512 would inflate κ a hundredfold. A gap is taken only when
    the steps were back to back: no empty step between them, and a request of the earlier step
    still known at the later one (else the engine may have idled on its input queue). With
    vLLM's async scheduling two ``schedule()`` calls overlap one forward pass; κ then reads low.
    """
    now, tokens = time.perf_counter(), int(output.total_num_scheduled_tokens)
    last, st.last_step = st.last_step, None
    if tokens <= 0:
        return
    if last is not None:
        t0, tokens0, ids0 = last
        gap, requests = now - t0, core.scheduler.requests
        if (tokens0 >= _KAPPA_MIN_TOKENS and gap <= _KAPPA_MAX_GAP_S
                and any(rid in requests for rid in ids0)):
            sample = gap * KAPPA_CHUNK_TOKENS / tokens0
            weight = 1.0 if st.kappa_samples == 0 else _KAPPA_EMA
            st.kappa_s += weight * (sample - st.kappa_s)
            st.kappa_samples += 1
    st.last_step = (now, tokens, list(output.num_scheduled_tokens))


# ---- registration -------------------------------------------------------------------------

UTILITIES = {
    fn.__name__: fn
    for fn in (
        dynbranch_info, dynbranch_lookup, dynbranch_lease, dynbranch_release,
        dynbranch_release_all, dynbranch_sweep, dynbranch_lease_stats, dynbranch_block_refs,
        dynbranch_load, dynbranch_wait_allocated, dynbranch_forget, dynbranch_resident,
        dynbranch_acquire, dynbranch_bind, dynbranch_handoffs, dynbranch_lease_refs,
        dynbranch_pool_state,
    )
}


def _wrap_shutdown(engine_core_cls: type) -> None:
    original = engine_core_cls.shutdown
    if getattr(original, "_dynbranch", False):
        return

    def shutdown(self: Any) -> Any:
        try:
            st = getattr(self, _STATE_ATTR, None)
            if st is not None and st.leases:
                dynbranch_release_all(self)
        except Exception:
            logger.exception("dynbranch: releasing leases at shutdown failed")
        return original(self)

    shutdown._dynbranch = True  # type: ignore[attr-defined]
    engine_core_cls.shutdown = shutdown


def register() -> None:
    """Entry point of ``vllm.general_plugins``: add the utility methods to ``EngineCore``."""
    try:
        from vllm.v1.engine.core import EngineCore
    except Exception:  # a vLLM without the v1 engine: leave it alone
        logger.exception("dynbranch plugin: vllm.v1.engine.core unavailable")
        return
    for name, fn in UTILITIES.items():
        setattr(EngineCore, name, fn)
    _wrap_shutdown(EngineCore)


__all__ = ["UTILITIES", "register"]
