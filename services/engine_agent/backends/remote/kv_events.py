"""KV-cache events of a remote engine: decoder, residency map, ZMQ subscriber with replay.

vLLM (``--kv-events-config``) publishes on a ZMQ PUB socket frames
``(topic, 8-byte big-endian sequence, msgpack payload)`` with payload ``[ts, [event, ...],
dp_rank]``. Events are ``BlockStored`` / ``BlockRemoved`` / ``AllBlocksCleared``, encoded as
tagged maps (``{"type": "BlockStored", "block_hashes": ...}``, vLLM 0.11+) or as positional
arrays with the tag first (earlier releases). Unknown fields and unknown event types are
ignored. Events sent before a subscriber joined, or lost in a gap of sequence numbers, are
fetched from the publisher's ROUTER replay socket: send an 8-byte start sequence, receive the
buffered frames, and a frame with sequence -1 ends the replay.

Endpoints: ``ipc://`` (the publisher binds, we connect) or ``tcp://127.0.0.1:PORT`` (a
non-wildcard tcp endpoint makes vLLM's publisher connect, so we bind, on loopback only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

logger = logging.getLogger(__name__)

BlockHash = int | bytes
END_SEQ = -1
GPU_MEDIA = (None, "GPU", "gpu")


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Blocks entered the prefix cache (``token_ids`` span all of them, in order)."""

    block_hashes: tuple[BlockHash, ...]
    parent_block_hash: BlockHash | None
    token_ids: tuple[int, ...]
    block_size: int
    medium: str | None = None
    group_idx: int | None = None


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """Blocks left the prefix cache."""

    block_hashes: tuple[BlockHash, ...]
    medium: str | None = None
    group_idx: int | None = None


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """The prefix cache was reset."""


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared


@dataclass(frozen=True, slots=True)
class EventBatch:
    """One published frame."""

    seq: int
    ts: float
    events: tuple[KVEvent, ...]
    dp_rank: int | None = None


# ---- decoding -----------------------------------------------------------------------------

#: Field order of the positional (array) encoding, after the tag.
_POSITIONAL = {
    "BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                    "medium", "lora_name", "extra_keys", "group_idx"),
    "BlockRemoved": ("block_hashes", "medium", "group_idx"),
    "AllBlocksCleared": (),
}


def _hashes(raw: Any) -> tuple[BlockHash, ...]:
    return tuple(raw or ())


def _build(tag: str, f: dict[str, Any]) -> KVEvent | None:
    if tag == "BlockStored":
        return BlockStored(
            block_hashes=_hashes(f.get("block_hashes")),
            parent_block_hash=f.get("parent_block_hash"),
            token_ids=tuple(f.get("token_ids") or ()),
            block_size=int(f.get("block_size") or 0),
            medium=f.get("medium"), group_idx=f.get("group_idx"),
        )
    if tag == "BlockRemoved":
        return BlockRemoved(_hashes(f.get("block_hashes")), f.get("medium"), f.get("group_idx"))
    if tag == "AllBlocksCleared":
        return AllBlocksCleared()
    return None


def decode_event(raw: Any) -> KVEvent | None:
    """One event from its map or positional encoding; None for unknown types."""
    if isinstance(raw, dict):
        tag = raw.get("type")
        return _build(tag, raw) if isinstance(tag, str) else None
    if isinstance(raw, (list, tuple)) and raw and isinstance(raw[0], str):
        names = _POSITIONAL.get(raw[0])
        if names is None:
            return None
        return _build(raw[0], dict(zip(names, raw[1:], strict=False)))
    return None


def decode_payload(seq: int, payload: bytes) -> EventBatch:
    """A frame's msgpack payload (array ``[ts, events, dp_rank]`` or a map) as an EventBatch."""
    body = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    if isinstance(body, dict):
        ts, events, rank = body.get("ts", 0.0), body.get("events", ()), body.get(
            "data_parallel_rank")
    else:
        ts, events = body[0], body[1]
        rank = body[2] if len(body) > 2 else None
    decoded = tuple(e for e in (decode_event(r) for r in events or ()) if e is not None)
    return EventBatch(seq=seq, ts=float(ts or 0.0), events=decoded, dp_rank=rank)


def encode_payload(events: Sequence[dict[str, Any] | list[Any]], ts: float = 0.0,
                   dp_rank: int | None = 0) -> bytes:
    """The publisher's payload encoding (tests and fake publishers)."""
    payload: bytes = msgpack.packb([ts, list(events), dp_rank], use_bin_type=True)
    return payload


# ---- residency ----------------------------------------------------------------------------


@dataclass(slots=True)
class ResidencyMap:
    """Which prefix blocks an engine holds, from its events.

    A block is known by its hash and by ``(parent hash, its tokens)``, so a prompt's resident
    prefix is found by walking its token blocks from the root, without knowing the engine's
    hash function. Counts, not flags: an engine may hold two blocks with one hash.
    """

    counts: dict[tuple[int, BlockHash], int] = field(default_factory=dict)
    children: dict[tuple[int, BlockHash | None, tuple[int, ...]], BlockHash] = field(
        default_factory=dict)
    block_size: int | None = None
    stored: int = 0
    removed: int = 0
    cleared: int = 0

    def apply(self, event: KVEvent) -> None:
        """Fold one event into the map (other media than the GPU tier are ignored)."""
        if isinstance(event, AllBlocksCleared):
            self.counts.clear()
            self.children.clear()
            self.cleared += 1
        elif event.medium in GPU_MEDIA:
            if isinstance(event, BlockStored):
                self._store(event)
            else:
                self._remove(event)

    def _store(self, ev: BlockStored) -> None:
        group, size = ev.group_idx or 0, ev.block_size or self.block_size or 0
        if size <= 0:
            return
        self.block_size = size
        parent = ev.parent_block_hash
        for i, block_hash in enumerate(ev.block_hashes):
            tokens = ev.token_ids[i * size:(i + 1) * size]
            key = (group, block_hash)
            self.counts[key] = self.counts.get(key, 0) + 1
            self.children[(group, parent, tuple(tokens))] = block_hash
            parent = block_hash
            self.stored += 1

    def _remove(self, ev: BlockRemoved) -> None:
        group = ev.group_idx or 0
        for block_hash in ev.block_hashes:
            key = (group, block_hash)
            left = self.counts.get(key, 0) - 1
            if left > 0:
                self.counts[key] = left
            else:
                self.counts.pop(key, None)
            self.removed += 1

    def is_resident(self, block_hash: BlockHash, group: int = 0) -> bool:
        """Whether a block hash is held."""
        return self.counts.get((group, block_hash), 0) > 0

    def resident_tokens(self, token_ids: Sequence[int], group: int = 0) -> int:
        """Leading tokens of ``token_ids`` held in whole resident blocks."""
        size = self.block_size
        if not size:
            return 0
        parent: BlockHash | None = None
        n = 0
        while n + size <= len(token_ids):
            block_hash = self.children.get((group, parent, tuple(token_ids[n:n + size])))
            if block_hash is None or not self.is_resident(block_hash, group):
                break
            parent, n = block_hash, n + size
        return n

    def __len__(self) -> int:
        return len(self.counts)


# ---- subscriber ---------------------------------------------------------------------------


def subscriber_binds(endpoint: str) -> bool:
    """Whether we bind: a non-wildcard tcp endpoint makes the publisher connect."""
    return endpoint.startswith("tcp://") and "*" not in endpoint


@dataclass(slots=True)
class SubscriberStats:
    """Counters of a subscriber (exported and asserted on in tests)."""

    batches: int = 0
    events: int = 0
    gaps: int = 0
    replayed: int = 0
    replay_failures: int = 0
    decode_errors: int = 0
    last_seq: int | None = None


class KVEventSubscriber:
    """Async ZMQ subscriber folding an engine's KV events into a ``ResidencyMap``."""

    def __init__(self, endpoint: str, replay_endpoint: str | None = None, topic: str = "",
                 residency: ResidencyMap | None = None, replay_timeout_s: float = 2.0,
                 on_batch: Callable[[EventBatch], None] | None = None) -> None:
        self.endpoint, self.replay_endpoint, self.topic = endpoint, replay_endpoint, topic
        self.residency = residency if residency is not None else ResidencyMap()
        self.stats = SubscriberStats()
        self._replay_timeout_s = replay_timeout_s
        self._on_batch = on_batch
        self._ctx: Any = None
        self._sub: Any = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Open the sockets, catch up through the replay socket, then follow live frames."""
        if self._task is not None:
            return
        import zmq
        import zmq.asyncio

        self._ctx = zmq.asyncio.Context()
        self._sub = self._ctx.socket(zmq.SUB)
        self._sub.setsockopt(zmq.SUBSCRIBE, self.topic.encode())
        self._sub.setsockopt(zmq.LINGER, 0)
        if subscriber_binds(self.endpoint):
            self._sub.bind(self.endpoint)
        else:
            self._sub.connect(self.endpoint)
        await self._replay(0, None)
        self._task = asyncio.create_task(self._run(), name="kv-event-subscriber")

    async def close(self) -> None:
        """Stop following and close the sockets; idempotent."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # shutting down
                await self._task
            self._task = None
        if self._sub is not None:
            self._sub.close(linger=0)
            self._sub = None
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None

    async def _run(self) -> None:
        while True:
            frames = await self._sub.recv_multipart()
            if len(frames) != 3:
                self.stats.decode_errors += 1
                continue
            _, seq_bytes, payload = frames
            await self.handle_frame(int.from_bytes(seq_bytes, "big", signed=True), payload)

    async def handle_frame(self, seq: int, payload: bytes) -> None:
        """Apply one live frame, replaying first when sequence numbers skipped."""
        last = self.stats.last_seq
        if last is not None and seq <= last:
            return  # already applied (replay overlap)
        expected = 0 if last is None else last + 1
        if seq > expected:
            self.stats.gaps += 1
            await self._replay(expected, seq)
        self._apply(seq, payload)

    def _apply(self, seq: int, payload: bytes) -> None:
        if self.stats.last_seq is not None and seq <= self.stats.last_seq:
            return
        try:
            batch = decode_payload(seq, payload)
        except Exception:  # noqa: BLE001 - a malformed frame must not stop the subscriber
            self.stats.decode_errors += 1
            logger.warning("undecodable KV event frame seq=%d", seq)
            self.stats.last_seq = seq
            return
        for event in batch.events:
            self.residency.apply(event)
        self.stats.batches += 1
        self.stats.events += len(batch.events)
        self.stats.last_seq = seq
        if self._on_batch is not None:
            self._on_batch(batch)

    async def _replay(self, start: int, stop: int | None) -> None:
        """Apply buffered frames with ``start <= seq < stop`` from the replay socket."""
        if not self.replay_endpoint or self._ctx is None:
            return
        import zmq

        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(self.replay_endpoint)
        try:
            await sock.send_multipart([b"", start.to_bytes(8, "big", signed=True)])
            while True:
                if not await sock.poll(int(self._replay_timeout_s * 1000)):
                    self.stats.replay_failures += 1
                    logger.warning("KV event replay from %d timed out", start)
                    return
                frames = await sock.recv_multipart()
                if len(frames) < 4:
                    self.stats.decode_errors += 1
                    continue
                seq = int.from_bytes(frames[2], "big", signed=True)
                if seq == END_SEQ:
                    return
                if seq >= start and (stop is None or seq < stop):
                    self._apply(seq, frames[3])
                    self.stats.replayed += 1
        finally:
            sock.close(linger=0)


__all__ = [
    "AllBlocksCleared", "BlockRemoved", "BlockStored", "EventBatch", "KVEvent",
    "KVEventSubscriber", "ResidencyMap", "SubscriberStats", "decode_event", "decode_payload",
    "encode_payload", "subscriber_binds",
]
