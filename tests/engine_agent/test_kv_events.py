"""KV-cache event decoding, the residency map, and the ZMQ subscriber's replay catch-up.

Frames are built by hand in both encodings vLLM has used: tagged maps (0.11+, what 0.32.0 sends)
and positional arrays with the tag first (up to about 0.10). The subscriber is tested against a
fake publisher on real ZMQ sockets over ``ipc://`` in a temp dir.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgpack
import pytest
import zmq
import zmq.asyncio

from services.engine_agent.backends.remote.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEventSubscriber,
    ResidencyMap,
    decode_event,
    decode_payload,
    encode_payload,
    subscriber_binds,
)

BS = 4  # block size of the hand-built events


def stored_map(hashes, parent, tokens, **extra):
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
            "token_ids": tokens, "block_size": BS, "lora_id": None, "medium": "GPU", **extra}


def stored_array(hashes, parent, tokens):
    return ["BlockStored", hashes, parent, tokens, BS, None, "GPU"]


def removed_map(hashes):
    return {"type": "BlockRemoved", "block_hashes": hashes, "medium": "GPU"}


def test_decode_tagged_map_ignores_unknown_fields() -> None:
    ev = decode_event(stored_map([1, 2], None, list(range(8)), group_idx=0,
                                 kv_cache_spec_kind="full", brand_new_field={"x": 1}))
    assert ev == BlockStored((1, 2), None, tuple(range(8)), BS, "GPU", 0)


def test_decode_positional_arrays() -> None:
    assert decode_event(stored_array([7], 3, [1, 2, 3, 4])) == BlockStored(
        (7,), 3, (1, 2, 3, 4), BS, "GPU", None)
    assert decode_event(["BlockRemoved", [7, 8], "GPU"]) == BlockRemoved((7, 8), "GPU")
    assert decode_event(["BlockRemoved", [7]]) == BlockRemoved((7,), None)
    assert decode_event(["AllBlocksCleared"]) == AllBlocksCleared()
    # extra trailing positional fields from a newer release are ignored
    assert decode_event(["BlockRemoved", [9], "GPU", 0, "LOCAL", "x"]) == BlockRemoved(
        (9,), "GPU", 0)


def test_decode_unknown_event_types_are_skipped() -> None:
    assert decode_event({"type": "BlockPinned", "block_hashes": [1]}) is None
    assert decode_event(["SomethingElse", 1]) is None
    assert decode_event(42) is None
    payload = encode_payload([{"type": "Mystery"}, removed_map([5])], ts=1.5)
    batch = decode_payload(3, payload)
    assert batch.seq == 3 and batch.ts == 1.5 and batch.events == (BlockRemoved((5,), "GPU"),)


def test_decode_payload_map_form_and_bytes_hashes() -> None:
    body = {"ts": 2.0, "events": [stored_map([b"\x01" * 32], None, [1, 2, 3, 4])],
            "data_parallel_rank": 0}
    batch = decode_payload(0, msgpack.packb(body, use_bin_type=True))
    assert batch.events[0].block_hashes == (b"\x01" * 32,)


def test_residency_walks_prefix_by_tokens_and_counts_duplicates() -> None:
    rm = ResidencyMap()
    rm.apply(decode_event(stored_map([10, 11], None, [1, 2, 3, 4, 5, 6, 7, 8])))
    rm.apply(decode_event(stored_array([12], 11, [9, 9, 9, 9])))
    assert rm.resident_tokens([1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9, 0]) == 12
    assert rm.resident_tokens([1, 2, 3, 4, 5, 6, 7, 0]) == 4  # second block differs
    assert rm.resident_tokens([2, 2, 3, 4]) == 0
    # a second copy of block 11, then one removal: still resident
    rm.apply(decode_event(stored_map([11], 10, [5, 6, 7, 8])))
    rm.apply(decode_event(removed_map([11])))
    assert rm.is_resident(11)
    rm.apply(decode_event(removed_map([11])))
    assert not rm.is_resident(11)
    assert rm.resident_tokens([1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 9]) == 4  # chain broken at 11


def test_residency_ignores_other_media_and_clears() -> None:
    rm = ResidencyMap()
    rm.apply(decode_event(stored_map([1], None, [1, 2, 3, 4], medium="CPU")))
    assert len(rm) == 0
    rm.apply(decode_event(stored_map([1], None, [1, 2, 3, 4])))
    rm.apply(AllBlocksCleared())
    assert len(rm) == 0 and rm.resident_tokens([1, 2, 3, 4]) == 0


def test_tcp_loopback_binds_and_ipc_connects() -> None:
    assert subscriber_binds("tcp://127.0.0.1:5557")
    assert not subscriber_binds("tcp://*:5557")
    assert not subscriber_binds("ipc:///tmp/x.ipc")


class FakePublisher:
    """vLLM's ZmqEventPublisher protocol: PUB frames plus a ROUTER replay buffer."""

    def __init__(self, folder: Path, topic: str = "kv") -> None:
        self.ctx = zmq.asyncio.Context()
        self.endpoint = f"ipc://{folder}/kv.ipc"
        self.replay_endpoint = f"ipc://{folder}/kv-replay.ipc"
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.bind(self.endpoint)
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.bind(self.replay_endpoint)
        self.topic = topic.encode()
        self.buffer: list[tuple[int, bytes]] = []
        self.replay_requests: list[int] = []
        self.task = asyncio.create_task(self._serve_replay())

    async def publish(self, seq: int, events: list, send: bool = True) -> None:
        payload = encode_payload(events, ts=float(seq))
        self.buffer.append((seq, payload))
        if send:
            await self.pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload])

    async def _serve_replay(self) -> None:
        while True:
            client, _, start = await self.router.recv_multipart()
            first = int.from_bytes(start, "big")
            self.replay_requests.append(first)
            for seq, payload in self.buffer:
                if seq >= first:
                    await self.router.send_multipart(
                        [client, b"", self.topic, seq.to_bytes(8, "big"), payload])
            await self.router.send_multipart(
                [client, b"", b"", (-1).to_bytes(8, "big", signed=True), b""])

    async def close(self) -> None:
        self.task.cancel()
        self.pub.close(0)
        self.router.close(0)
        self.ctx.term()


async def wait_for(cond, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_subscriber_catches_up_then_replays_a_gap(tmp_path: Path) -> None:
    pub = FakePublisher(tmp_path)
    # sent before the subscriber exists: only the replay buffer has it
    await pub.publish(0, [stored_map([1], None, [1, 2, 3, 4])])
    sub = KVEventSubscriber(pub.endpoint, pub.replay_endpoint, topic="kv")
    await sub.start()
    try:
        assert pub.replay_requests == [0] and sub.residency.is_resident(1)
        await asyncio.sleep(0.2)  # let the SUB connection settle (slow joiner)
        await pub.publish(1, [stored_array([2], 1, [5, 6, 7, 8])])
        await wait_for(lambda: sub.stats.last_seq == 1)
        # seq 2 is lost on the wire; 3 arrives and triggers a replay from 2
        await pub.publish(2, [removed_map([1])], send=False)
        await pub.publish(3, [stored_map([3], 2, [9, 9, 9, 9])])
        await wait_for(lambda: sub.stats.last_seq == 3)
        assert sub.stats.gaps == 1 and pub.replay_requests[-1] == 2
        assert not sub.residency.is_resident(1)  # the replayed removal was applied
        assert sub.residency.is_resident(2) and sub.residency.is_resident(3)
        assert sub.stats.batches == 4
    finally:
        await sub.close()
        await pub.close()


async def test_subscriber_survives_garbage_and_duplicates(tmp_path: Path) -> None:
    pub = FakePublisher(tmp_path)
    sub = KVEventSubscriber(pub.endpoint, pub.replay_endpoint, topic="kv")
    await sub.start()
    try:
        await asyncio.sleep(0.2)
        await pub.pub.send_multipart([b"kv", (0).to_bytes(8, "big"), b"\xc1not msgpack"])
        await pub.publish(1, [stored_map([5], None, [1, 1, 1, 1])])
        await pub.publish(1, [removed_map([5])])  # a duplicate sequence is ignored
        await wait_for(lambda: sub.stats.last_seq == 1)
        await asyncio.sleep(0.05)
        assert sub.stats.decode_errors == 1 and sub.residency.is_resident(5)
    finally:
        await sub.close()
        await pub.close()


async def test_replay_without_publisher_times_out_cleanly(tmp_path: Path) -> None:
    sub = KVEventSubscriber(f"ipc://{tmp_path}/none.ipc", f"ipc://{tmp_path}/none-replay.ipc",
                            replay_timeout_s=0.1)
    await sub.start()
    await sub.close()
    assert sub.stats.replay_failures == 1


@pytest.mark.parametrize("encoding", ["map", "array"])
def test_block_stored_spanning_many_blocks(encoding: str) -> None:
    tokens = list(range(12))
    raw = (stored_map([1, 2, 3], None, tokens) if encoding == "map"
           else stored_array([1, 2, 3], None, tokens))
    rm = ResidencyMap()
    rm.apply(decode_event(raw))
    assert rm.resident_tokens(tokens + [99]) == 12
