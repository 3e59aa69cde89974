"""The engine-core side of the dynbranch vLLM plugin: prefix residency, prefix leases, the
exact first-allocation signal and priority moves, as ``dynbranch_*`` utility methods of
``EngineCore``.

``register_engine_core()`` adds them (``dynbranch_vllm_plugin.register``, the entry point, calls
it in every vLLM process). A client calls them with ``engine_core.call_utility_async(name,
*args)``: the embedded backend (``VllmBackend``) directly, a remote agent through the lease
channel (``channel``, opened in the API server by ``frontend``). The engine core runs them on its
busy-loop thread between steps, so they may read and change the block pool without locks. vLLM
itself stays unmodified.

This module holds registration, the schedule hook, prefix lookup and the first-allocation
signal; the lease mechanism (acquire, release, bind, the handoff check, κ) is in ``leases``,
moving a live request between priorities (``dynbranch_set_priority``) in ``priority``.
Rules every hook keeps, because an exception escaping a scheduler hook kills the engine:

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

from dynbranch_vllm_plugin import leases, priority
from dynbranch_vllm_plugin.leases import block_size, manager
from dynbranch_vllm_plugin.request_ids import names, stems

#: Under ``vllm.``: vLLM configures only its own logger (package ``__init__``).
logger = logging.getLogger(f"vllm.{__name__}")

#: Allocation records kept for requests whose waiter has not asked yet.
_MAX_ALLOC_RECORDS = 8192
#: A wait nobody forgot (its client vanished) is answered None after this long.
_MAX_WAIT_S = 900.0
_STATE_ATTR = "_dynbranch_state"


@dataclass(slots=True)
class _Waiter:
    """A pending ``dynbranch_wait_allocated``: its future and the request names it waits for."""

    future: Future
    names: tuple[str, ...]
    since: float


@dataclass(slots=True)
class _State:
    """Allocation signals of one engine core (lives in the engine-core process)."""

    #: Records of requests scheduled before anyone waited, under each stem of their engine id.
    allocated: OrderedDict[str, dict[str, Any]] = field(default_factory=OrderedDict)
    waiters: dict[str, _Waiter] = field(default_factory=dict)  # request name -> waiter
    hooked: bool = False
    expired_at: float = 0.0  # when waiters were last checked for age


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


def dynbranch_wait_allocated(self: Any, request_id: str, wait_unknown: bool = False) -> Any:
    """First positive-token allocation of a request: at once, or a Future.

    ``request_id`` is the engine's id or the client's own (``request_ids``). The engine delays
    its reply until the Future resolves, which the scheduler hook does right after the step that
    first scheduled the request (before its forward pass). A request the engine does not have
    is answered None (it finished or was aborted before it was scheduled) unless
    ``wait_unknown``: a remote client may ask before its HTTP request reached the engine.
    """
    st = _state(self)
    _expire_waiters(st)
    record = _take_record(st, names(request_id))
    if record is not None:
        return record
    if not wait_unknown and leases.engine_request_id(self, request_id) is None:
        return None
    waiter = _Waiter(Future(), names(request_id), time.monotonic())
    for name in waiter.names:
        replaced = st.waiters.get(name)
        if replaced is not None:  # a second wait for one request: the first is answered None
            _resolve(st, replaced, None)
        st.waiters[name] = waiter
    return waiter.future


def dynbranch_forget(self: Any, request_id: str) -> bool:
    """Stop waiting for a request (it finished or was aborted); resolves its waiter with None."""
    st = _state(self)
    _take_record(st, names(request_id))
    waiter = next((st.waiters[n] for n in names(request_id) if n in st.waiters), None)
    if waiter is None:
        return False
    return _resolve(st, waiter, None)


def _take_record(st: _State, request_names: tuple[str, ...]) -> dict[str, Any] | None:
    """Remove and return the allocation record of a request, by any of its names."""
    record = next((st.allocated[n] for n in request_names if n in st.allocated), None)
    if record is not None:
        for stem in stems(record["request_id"]):
            st.allocated.pop(stem, None)
    return record


def _resolve(st: _State, waiter: _Waiter, record: dict[str, Any] | None) -> bool:
    """Answer a waiter (once) and drop it under every name; False when it was answered."""
    for name in waiter.names:
        if st.waiters.get(name) is waiter:
            del st.waiters[name]
    if waiter.future.done():
        return False
    waiter.future.set_result(record)
    return True


def _expire_waiters(st: _State, now: float | None = None) -> None:
    """Answer None to waits older than ``_MAX_WAIT_S`` (checked at most once a second)."""
    now = time.monotonic() if now is None else now
    if now - st.expired_at < 1.0:
        return
    st.expired_at = now
    for waiter in {id(w): w for w in st.waiters.values()}.values():
        if now - waiter.since > _MAX_WAIT_S:
            _resolve(st, waiter, None)


def _signal_allocations(core: Any, output: Any) -> None:
    st, now = _state(core), time.time()
    for new in output.scheduled_new_reqs:
        record = {"cached_tokens": int(new.num_computed_tokens), "t": now,
                  "request_id": str(new.req_id)}
        keys = stems(new.req_id)
        waiter = next((st.waiters[k] for k in keys if k in st.waiters), None)
        if waiter is not None:
            _resolve(st, waiter, record)
            continue
        for key in keys:
            st.allocated[key] = record
        while len(st.allocated) > _MAX_ALLOC_RECORDS:
            st.allocated.popitem(last=False)
    if st.waiters:
        _expire_waiters(st)


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
        priority.dynbranch_set_priority,
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


def register_engine_core() -> None:
    """Add the utility methods to ``EngineCore`` (and release every lease at its shutdown)."""
    try:
        from vllm.v1.engine.core import EngineCore
    except Exception:  # a vLLM without the v1 engine: leave it alone
        logger.exception("dynbranch plugin: vllm.v1.engine.core unavailable")
        return
    for name, fn in UTILITIES.items():
        setattr(EngineCore, name, fn)
    _wrap_shutdown(EngineCore)


__all__ = ["UTILITIES", "register_engine_core"]
