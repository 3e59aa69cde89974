"""vLLM general plugin: prefix residency, prefix leases and first-allocation signals.

vLLM loads it through the ``vllm.general_plugins`` entry point (``pyproject.toml``) in every one
of its processes; ``register()`` adds ``dynbranch_*`` utility methods to ``EngineCore``. The
parent (``VllmBackend``) calls them with ``engine_core.call_utility_async(name, *args)``; the
engine core runs them on its busy-loop thread between steps, so they may read and change the
block pool without locks. vLLM itself stays unmodified.

This module holds registration, the schedule hook, prefix lookup and the first-allocation
signal; the lease mechanism (acquire, release, bind, the handoff check, κ) is in
``plugin_leases``. Rules every hook keeps, because an exception escaping a scheduler hook kills
the engine:

* every hook is guarded and logs instead of raising, each step part on its own;
* every utility installs the schedule hook first (handoffs and signals run in it);
* a lease records exactly the blocks it touched and frees exactly those, once, tail first;
  ``dynbranch_release_all`` and engine shutdown release every one of them.

Arguments and results cross processes as msgpack: only ints, floats, strings, lists and dicts.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from services.engine_agent.backends.vllm import plugin_leases as leases
from services.engine_agent.backends.vllm.plugin_leases import block_size, manager

logger = logging.getLogger(__name__)

#: Allocation records kept for requests whose waiter has not asked yet.
_MAX_ALLOC_RECORDS = 8192
_STATE_ATTR = "_dynbranch_state"


@dataclass(slots=True)
class _State:
    """Allocation signals of one engine core (lives in the engine-core process)."""

    allocated: OrderedDict[str, dict[str, float]] = field(default_factory=OrderedDict)
    waiters: dict[str, Future] = field(default_factory=dict)
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


def _block_hashes(core: Any, token_ids: list[int]) -> list[Any]:
    """Chained block hashes of the full blocks of ``token_ids``, as the scheduler computes them."""
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import hash_block_tokens

    hash_fn = get_hash_fn_by_name(core.vllm_config.cache_config.prefix_caching_hash_algo)
    size = block_size(core)
    hashes: list[Any] = []
    parent = None
    for start in range(0, len(token_ids) - size + 1, size):
        parent = hash_block_tokens(hash_fn, parent, token_ids[start:start + size], None)
        hashes.append(parent)
    return hashes


def _resident(core: Any, token_ids: list[int], max_len: int) -> tuple[tuple[list[Any], ...], int]:
    """Resident prefix blocks per group and their token count, capped at ``max_len``."""
    mgr = manager(core)
    if max_len <= 0 or not mgr.enable_caching:
        return (), 0
    blocks, hit_len, _ = mgr.coordinator.find_longest_cache_hit(
        _block_hashes(core, token_ids), max_len
    )
    return blocks, int(hit_len)


def dynbranch_info(self: Any) -> dict[str, Any]:
    """Static facts of the engine core (also installs the scheduler hook)."""
    _state(self)
    mgr = manager(self)
    cfg = self.vllm_config
    return {
        "block_size": block_size(self),
        "num_blocks": int(mgr.block_pool.num_gpu_blocks),
        "max_num_seqs": int(cfg.scheduler_config.max_num_seqs),
        "max_num_batched_tokens": int(cfg.scheduler_config.max_num_batched_tokens),
        "max_model_len": int(cfg.model_config.max_model_len),
        "enable_caching": bool(mgr.enable_caching),
        "hash_algo": str(cfg.cache_config.prefix_caching_hash_algo),
    }


def dynbranch_lookup(self: Any, token_ids: list[int]) -> dict[str, int]:
    """Resident tokens of a prompt, as the scheduler would reuse them (stops before the last)."""
    leases.sweep(self)
    _, hit = _resident(self, list(token_ids), len(token_ids) - 1)
    return {"prompt_tokens": len(token_ids), "resident_tokens": hit,
            "block_size": block_size(self)}


def dynbranch_resident(self: Any, token_ids: list[int]) -> dict[str, Any]:
    """Resident reusable prefix (group 0): block ids, the free ones, and their digest."""
    leases.sweep(self)
    blocks, _ = _resident(self, list(token_ids), len(token_ids) - 1)
    group = list(blocks[0]) if blocks else []
    return {"block_ids": [int(b.block_id) for b in group],
            "free": [int(b.block_id) for b in group if b.ref_cnt == 0],
            "digest": leases.block_digest(group)}


def dynbranch_lease(self: Any, lease_id: str, token_ids: list[int], ttl_s: float) -> dict[str, Any]:
    """Add one reference to each resident full block of ``token_ids``; renew if held."""
    leases.sweep(self)
    renewed = leases.renew(self, lease_id, ttl_s)
    if renewed is not None:
        return renewed
    blocks, hit = _resident(self, list(token_ids), len(token_ids))
    groups = [list(g) for g in blocks]
    if not hit or not any(groups):
        return {"blocks": 0, "tokens": 0, "block_ids": [], "renewed": False}
    return leases.grant(self, lease_id, groups, hit, ttl_s)


def dynbranch_load(self: Any) -> dict[str, Any]:
    """Live scheduler view: running, waiting, KV blocks used and leased."""
    leases.sweep(self)
    pool = manager(self).block_pool
    running, waiting = self.scheduler.get_request_counts()
    usable = pool.num_gpu_blocks - 1  # the null block is never free
    return {
        "running": int(running),
        "waiting": int(waiting),
        "kv_blocks_used": int(usable - pool.get_num_free_blocks()),
        "kv_blocks_total": int(usable),
        "leased_blocks": leases.leased_blocks(self),
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


def _signal_allocations(core: Any, output: Any) -> None:
    st, now = _state(core), time.time()
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


# ---- the schedule hook --------------------------------------------------------------------

#: What runs after every ``schedule()``, in order; each part is guarded alone.
_STEP_PARTS: tuple[Callable[[Any, Any], None], ...] = (
    _signal_allocations, leases.hand_off_scheduled, leases.measure_kappa,
    leases.sweep_after_step,
)


def _on_scheduled(core: Any, output: Any) -> None:
    """The schedule hook's parts, each guarded alone: one failing must not skip the others."""
    for part in _STEP_PARTS:
        try:
            part(core, output)
        except Exception:  # an escaping exception would kill the engine core
            logger.exception("dynbranch schedule hook: %s failed", part.__name__)


def _install_schedule_hook(core: Any, st: _State) -> None:
    scheduler = core.scheduler
    original = scheduler.schedule

    def schedule(*args: Any, **kwargs: Any) -> Any:
        output = original(*args, **kwargs)
        try:
            _on_scheduled(core, output)
        except Exception:  # an escaping exception would kill the engine core
            logger.exception("dynbranch schedule hook failed")
        return output

    scheduler.schedule = schedule
    st.hooked = True


# ---- registration -------------------------------------------------------------------------


def _hooked(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as a utility that first installs the schedule hook (handoffs need it)."""

    # ``wraps`` keeps ``fn``'s signature visible: the engine core checks the argument count
    # against it (``EngineCore._convert_msgspec_args``).
    @functools.wraps(fn)
    def utility(self: Any, *args: Any) -> Any:
        _state(self)
        return fn(self, *args)

    return utility


UTILITIES = {
    fn.__name__: _hooked(fn)
    for fn in (
        dynbranch_info, dynbranch_lookup, dynbranch_lease, dynbranch_load,
        dynbranch_wait_allocated, dynbranch_forget, dynbranch_resident, *leases.LEASE_UTILITIES,
    )
}


def _wrap_shutdown(engine_core_cls: Any) -> None:
    original = engine_core_cls.shutdown
    if getattr(original, "_dynbranch", False):
        return

    def shutdown(self: Any) -> Any:
        try:
            leases.dynbranch_release_all(self)
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
