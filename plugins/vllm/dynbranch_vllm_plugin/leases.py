"""The prefix-lease mechanism of the dynbranch vLLM plugin, on the engine core's thread.

``engine_core`` registers these utilities on ``EngineCore`` and wires the step parts
(``hand_off_scheduled``, ``measure_kappa``, ``sweep_after_step``) into its guarded schedule hook;
this module never imports ``engine_core``. A lease records exactly the blocks it touched and
frees exactly those, once, tail first; leases expire (TTL) and are swept at every call, every
step and on the parent's timer.

The ``LeasePort`` utilities (``dynbranch_acquire``, ``_bind``, ``_handoffs``, ``_lease_refs``,
``_pool_state``; ``dynbranch_resident`` in ``engine_core``) name a prefix by block ids and a
digest of the blocks' own hashes, so an acquire fails closed once any block was evicted or
reused. They use KV-cache group 0 only: right for the single-group (full-attention) models we
run. A lease is bound to the client's own request id and handed off to whichever engine request
carries it (``request_ids``: AsyncLLM's suffix, the OpenAI server's ``cmpl-``/``chatcmpl-``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from dynbranch_vllm_plugin.request_ids import is_request_of, names, stems
from dynbranch_vllm_plugin.values import KAPPA_CHUNK_TOKENS, prefix_digest

#: Under ``vllm.``: vLLM configures only its own logger (package ``__init__``).
logger = logging.getLogger(f"vllm.{__name__}")

_LEASES_ATTR = "_dynbranch_leases"
#: Handoff records kept for a parent that has not drained them yet.
_MAX_HANDOFFS = 4096
#: κ before the first measurement, its EMA weight, the longest gap taken for a step, and the
#: fewest tokens a measured step had (see ``measure_kappa``).
_KAPPA_DEFAULT_S = 0.05
_KAPPA_EMA = 0.2
_KAPPA_MAX_GAP_S = 10.0
_KAPPA_MIN_TOKENS = KAPPA_CHUNK_TOKENS // 2


@dataclass(slots=True)
class _Lease:
    blocks: list[list[Any]]  # per KV-cache group, prefix order
    expires_at: float
    tokens: int
    bound: str | None = None  # the client's request id it hands off to (``request_ids``)


@dataclass(slots=True)
class HeldLeases:
    """Lease state of one engine core (lives in the engine-core process)."""

    leases: dict[str, _Lease] = field(default_factory=dict)
    granted: int = 0
    released: int = 0
    expired: int = 0
    bound: dict[str, str] = field(default_factory=dict)  # request name -> lease id
    handoffs: list[dict[str, Any]] = field(default_factory=list)
    kappa_s: float = _KAPPA_DEFAULT_S
    kappa_samples: int = 0
    last_step: tuple[float, int, list[str]] | None = None  # (t, tokens, request ids)


def book(core: Any) -> HeldLeases:
    """The core's lease book, created on first use."""
    lb = getattr(core, _LEASES_ATTR, None)
    if lb is None:
        lb = HeldLeases()
        setattr(core, _LEASES_ATTR, lb)
    return lb


def manager(core: Any) -> Any:
    """The engine's KV-cache manager."""
    return core.scheduler.kv_cache_manager


def block_size(core: Any) -> int:
    """Tokens per KV block (the hash block size)."""
    return int(manager(core).block_pool.hash_block_size)


def leased_blocks(core: Any) -> int:
    """Blocks referenced by live leases (a block in two leases counts twice)."""
    return sum(len(g) for lease in book(core).leases.values() for g in lease.blocks)


# ---- release and expiry -------------------------------------------------------------------


def _release(core: Any, lb: HeldLeases, lease_id: str) -> int:
    lease = lb.leases.pop(lease_id, None)
    if lease is None:
        return 0
    _unbind(lb, lease_id, lease)
    pool = manager(core).block_pool
    for group in lease.blocks:
        # Never underflow a count: a block at 0 was not ours to free (it cannot happen while we
        # hold a reference, but a bug here must not corrupt the engine's pool).
        safe = [b for b in reversed(group) if b.ref_cnt > 0]
        if len(safe) != len(group):
            logger.error("lease %s: %d blocks already at ref 0", lease_id, len(group) - len(safe))
        pool.free_blocks(safe)  # tail first: the prefix's end is evicted before its start
    lb.released += 1
    return sum(len(g) for g in lease.blocks)


def _unbind(lb: HeldLeases, lease_id: str, lease: _Lease) -> str | None:
    """Drop a lease's binding; the request id it was bound under (None: it was not)."""
    bound_as, lease.bound = lease.bound, None
    if bound_as is not None:
        for name in names(bound_as):
            if lb.bound.get(name) == lease_id:
                del lb.bound[name]
    return bound_as


def sweep(core: Any, now: float | None = None) -> int:
    """Release expired leases; how many expired."""
    lb = book(core)
    now = time.monotonic() if now is None else now
    expired = [lid for lid, lease in lb.leases.items() if lease.expires_at <= now]
    for lid in expired:
        _release(core, lb, lid)
    lb.expired += len(expired)
    return len(expired)


# ---- TTL leases by token ids (``VllmLeases``) ---------------------------------------------


def renew(core: Any, lease_id: str, ttl_s: float) -> dict[str, Any] | None:
    """Extend a held lease's TTL and describe it; None when it is not held."""
    held = book(core).leases.get(lease_id)
    if held is None:
        return None
    held.expires_at = time.monotonic() + max(float(ttl_s), 0.0)
    return _lease_view(held, renewed=True)


def grant(core: Any, lease_id: str, groups: list[list[Any]], tokens: int,
          ttl_s: float) -> dict[str, Any]:
    """Add one reference to each block of ``groups`` under a new lease; describe it."""
    lb = book(core)
    manager(core).block_pool.touch([b for g in groups for b in g])
    lease = _Lease(blocks=groups, expires_at=time.monotonic() + max(float(ttl_s), 0.0),
                   tokens=tokens)
    lb.leases[lease_id] = lease
    lb.granted += 1
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
    released = _release(self, book(self), lease_id)
    sweep(self)
    return released


def dynbranch_release_all(self: Any) -> int:
    """Release every lease (shutdown, restart of the agent); returns blocks released."""
    lb = book(self)
    return sum(_release(self, lb, lid) for lid in list(lb.leases))


def dynbranch_sweep(self: Any) -> int:
    """Release expired leases (the parent calls this on a timer)."""
    return sweep(self)


def dynbranch_lease_stats(self: Any) -> dict[str, int]:
    """Counts of live leases, their blocks, and lifetime grants, releases and expiries."""
    sweep(self)
    lb = book(self)
    return {"leases": len(lb.leases), "blocks": leased_blocks(self), "granted": lb.granted,
            "released": lb.released, "expired": lb.expired}


def dynbranch_block_refs(self: Any, block_ids: list[int]) -> list[int]:
    """Reference counts of blocks (tests check that they return to their start)."""
    blocks = manager(self).block_pool.blocks
    return [int(blocks[i].ref_cnt) for i in block_ids]


# ---- the lease port: digest-checked leases and allocation-time handoffs --------------------


def block_digest(blocks: list[Any]) -> str:
    """``prefix_digest`` of the blocks' own hashes (bytes; stable within this engine process)."""
    return prefix_digest(b.block_hash for b in blocks)


def _held_blocks(pool: Any, block_ids: list[int], digest: str) -> list[Any] | None:
    """The blocks iff every id is a real cached block and their hashes match ``digest``."""
    ids = [int(i) for i in block_ids]
    if not ids or len(set(ids)) != len(ids) or not all(0 < i < pool.num_gpu_blocks for i in ids):
        return None
    blocks = [pool.blocks[i] for i in ids]
    if any(b.is_null or b.block_hash is None for b in blocks) or block_digest(blocks) != digest:
        return None
    return blocks


def dynbranch_acquire(self: Any, lease_id: str, block_ids: list[int], digest: str,
                      safety_ttl_s: float = 60.0) -> bool:
    """All or nothing: one reference on each block iff all still hold the prefix ``digest``.

    ``safety_ttl_s`` only bounds a lost release; the provider releases long before.
    """
    sweep(self)
    lb = book(self)
    if lease_id in lb.leases or safety_ttl_s <= 0:
        return False
    pool = manager(self).block_pool
    blocks = _held_blocks(pool, block_ids, digest)
    if blocks is None:
        return False
    pool.touch(blocks)
    lb.leases[lease_id] = _Lease(blocks=[blocks], tokens=len(blocks) * block_size(self),
                                 expires_at=time.monotonic() + float(safety_ttl_s))
    lb.granted += 1
    return True


def dynbranch_bind(self: Any, lease_id: str, request_id: str) -> bool:
    """Hand a lease to the client's request ``request_id`` at its first allocation, whatever
    vLLM renamed it to (``request_ids``). A request already holding blocks is checked now.
    False when the lease is not held."""
    lb = book(self)
    lease = lb.leases.get(lease_id)
    if lease is None:
        return False
    _unbind(lb, lease_id, lease)
    for name in names(request_id):
        displaced = lb.leases.get(lb.bound.get(name, ""))
        if displaced is not None:  # one lease per request: the latest binding wins
            _unbind(lb, lb.bound[name], displaced)
    lease.bound = request_id
    for name in names(request_id):
        lb.bound[name] = lease_id
    engine_id = engine_request_id(self, request_id)
    if engine_id is not None and any(_request_blocks(self, engine_id)):
        _hand_off(self, lb, lease_id, engine_id, at_bind=True)
    return True


def engine_request_id(core: Any, request_id: str) -> str | None:
    """The engine's id of the client's request ``request_id``, if the engine has it now."""
    return next((rid for rid in core.scheduler.requests if is_request_of(rid, request_id)), None)


def _bound_lease(lb: HeldLeases, engine_id: str) -> str | None:
    """The lease bound to the client request an engine request id carries, if any."""
    return next((lb.bound[n] for n in stems(engine_id) if n in lb.bound), None)


def _request_blocks(core: Any, engine_id: str) -> tuple[list[Any], ...]:
    return manager(core).coordinator.get_blocks(engine_id)


def _hand_off(core: Any, lb: HeldLeases, lease_id: str, engine_id: str,
              at_bind: bool = False) -> None:
    """Release the lease iff the request references every leased block; record the outcome.

    ``at_bind``: the request already held blocks when the lease was bound (a lease granted after
    the continuation's first allocation, before its client heard of it): released at once, it
    protected nothing.
    """
    lease = lb.leases[lease_id]
    bound_as = _unbind(lb, lease_id, lease)
    groups = _request_blocks(core, engine_id)
    owned = len(groups) >= len(lease.blocks) and all(
        {b.block_id for b in leased} <= {b.block_id for b in groups[i]}
        for i, leased in enumerate(lease.blocks))
    if owned:
        _release(core, lb, lease_id)
    else:
        logger.warning("lease %s: request %s lacks leased blocks; kept", lease_id, engine_id)
    lb.handoffs.append({"lease_id": lease_id, "request_id": bound_as or engine_id,
                        "t": time.time(), "owned": owned, "at_bind": at_bind})
    del lb.handoffs[:-_MAX_HANDOFFS]


def dynbranch_handoffs(self: Any) -> list[dict[str, Any]]:
    """Handoffs since the last call, oldest first."""
    lb = book(self)
    out, lb.handoffs = lb.handoffs, []
    return out


def dynbranch_lease_refs(self: Any) -> dict[str, int]:
    """Blocks each live lease references."""
    sweep(self)
    return {lid: sum(len(g) for g in lease.blocks) for lid, lease in book(self).leases.items()}


def dynbranch_pool_state(self: Any) -> dict[str, Any]:
    """Free and usable blocks, queue lengths, the running limit and κ."""
    sweep(self)
    pool = manager(self).block_pool
    running, waiting = self.scheduler.get_request_counts()
    free = int(pool.get_num_free_blocks())
    return {"free_blocks": free, "blocked_blocks": blocked_blocks(self, free),
            "total_blocks": int(pool.num_gpu_blocks) - 1,  # the null block is never free
            "waiting": int(waiting), "running": int(running),
            "max_running": int(self.scheduler.max_num_running_reqs),
            "kappa_s": book(self).kappa_s}


def blocked_blocks(core: Any, free: int) -> int:
    """Free blocks the head waiting request's next chunk lacks while a slot is free (0: nothing
    waits on memory, or it cannot be told). Like the scheduler's own admission: the resident
    prefix is reused, cached blocks with no reference come off the free queue, and the chunk is
    at most the step's token budget."""
    try:
        sched = core.scheduler
        if not sched.waiting or len(sched.running) >= sched.max_num_running_reqs:
            return 0
        request = sched.waiting.peek_request()
        size = int(manager(core).block_pool.hash_block_size)
        blocks, hit, *_ = manager(core).coordinator.find_longest_cache_hit(
            request.block_hashes, request.num_tokens - 1)
        hit_blocks = [b for group in blocks for b in group][: hit // size] if blocks else []
        chunk = min(request.num_tokens - hit, int(sched.max_num_scheduled_tokens))
        need = -(-(hit + chunk) // size) - hit // size
        need += sum(1 for b in hit_blocks if b.ref_cnt == 0)
        return max(0, need - free)
    except Exception:  # a vLLM without these internals: the provider falls back to headroom
        logger.debug("dynbranch: cannot tell whether waiting work lacks blocks", exc_info=True)
        return 0


# ---- step parts (run by ``engine_core``'s guarded schedule hook) --------------------------


def hand_off_scheduled(core: Any, output: Any) -> None:
    """Hand off every bound lease whose request was scheduled positive tokens in this step."""
    lb = book(core)
    if not lb.bound:
        return
    for engine_id, tokens in output.num_scheduled_tokens.items():
        lease_id = _bound_lease(lb, engine_id) if tokens > 0 else None
        if lease_id is not None:
            _hand_off(core, lb, lease_id, engine_id)


def sweep_after_step(core: Any, output: Any) -> None:
    """Release expired leases after a step (only when some are held)."""
    if book(core).leases:
        sweep(core)


def measure_kappa(core: Any, output: Any) -> None:
    """κ (LADS §3.4): an EMA of one step's wall time scaled to a 512-token chunk.

    A step's time is the gap from its ``schedule()`` to the next one that scheduled tokens,
    scaled by ``KAPPA_CHUNK_TOKENS / tokens`` of the earlier step. Only steps of at least
    ``_KAPPA_MIN_TOKENS`` count: a decode step's few tokens cost mostly the fixed per-step
    overhead, and scaling them to 512 would inflate κ a hundredfold. A gap is taken only when
    the steps were back to back: no empty step between them, and a request of the earlier step
    still known at the later one (else the engine may have idled on its input queue). With
    vLLM's async scheduling two ``schedule()`` calls overlap one forward pass; κ then reads low.
    """
    lb = book(core)
    now, tokens = time.perf_counter(), int(output.total_num_scheduled_tokens)
    last, lb.last_step = lb.last_step, None
    if tokens <= 0:
        return
    if last is not None:
        t0, tokens0, ids0 = last
        gap, requests = now - t0, core.scheduler.requests
        if (tokens0 >= _KAPPA_MIN_TOKENS and gap <= _KAPPA_MAX_GAP_S
                and any(rid in requests for rid in ids0)):
            sample = gap * KAPPA_CHUNK_TOKENS / tokens0
            weight = 1.0 if lb.kappa_samples == 0 else _KAPPA_EMA
            lb.kappa_s += weight * (sample - lb.kappa_s)
            lb.kappa_samples += 1
    lb.last_step = (now, tokens, list(output.num_scheduled_tokens))


#: The utilities this module adds to ``EngineCore`` (``engine_core.UTILITIES`` lists them all).
LEASE_UTILITIES = (
    dynbranch_release, dynbranch_release_all, dynbranch_sweep, dynbranch_lease_stats,
    dynbranch_block_refs, dynbranch_acquire, dynbranch_bind, dynbranch_handoffs,
    dynbranch_lease_refs, dynbranch_pool_state,
)

__all__ = [
    "LEASE_UTILITIES", "HeldLeases", "block_digest", "block_size", "book", "engine_request_id",
    "grant", "hand_off_scheduled", "leased_blocks", "manager", "measure_kappa", "renew", "sweep",
    "sweep_after_step",
]
