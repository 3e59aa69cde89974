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

Arguments and results cross processes as msgpack: only ints, floats, strings, lists and dicts.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

#: Allocation records kept for requests whose waiter has not asked yet.
_MAX_ALLOC_RECORDS = 8192
_STATE_ATTR = "_dynbranch_state"


@dataclass(slots=True)
class _Lease:
    blocks: list[list[Any]]  # per KV-cache group, prefix order
    expires_at: float
    tokens: int


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


# ---- registration -------------------------------------------------------------------------

UTILITIES = {
    fn.__name__: fn
    for fn in (
        dynbranch_info, dynbranch_lookup, dynbranch_lease, dynbranch_release,
        dynbranch_release_all, dynbranch_sweep, dynbranch_lease_stats, dynbranch_block_refs,
        dynbranch_load, dynbranch_wait_allocated, dynbranch_forget,
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
