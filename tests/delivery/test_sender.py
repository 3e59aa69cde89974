"""The sender under a virtual clock, and the inventory and paced link it drives.

Sender tests run on a fresh stdlib selector loop (aiotools' VirtualClock patches its selector)
with ``clock=loop.time``, so an 8-second transfer schedule replays instantly and exactly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiotools
import pytest

from services.common.values.leases import InventoryView, ResultKey
from services.delivery.frames import Frame, Inventory
from services.delivery.link import PacedLink
from services.delivery.sender import Sender
from tests.delivery import ENGINE, FRAMING, RATE, budget, frame, key

HOP = (FRAMING + 3000) / RATE  # 1.007 s per 3000-byte frame on the 32 kbit/s link


def run_virtual(main: Callable[[], Awaitable[Any]]) -> Any:
    """Run ``main`` on a fresh selector loop whose clock and sleeps are virtual."""
    async def patched() -> Any:
        with aiotools.VirtualClock().patch_loop():
            return await main()
    with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
        return runner.run(patched())


class Receiver:
    """Records (virtual time, key) of every received frame; may fail on chosen keys."""

    def __init__(self, expect: int, fail: frozenset[ResultKey] = frozenset()) -> None:
        self.got: list[tuple[float, ResultKey]] = []
        self.expect, self.fail = expect, fail
        self.done = asyncio.Event()

    async def __call__(self, f: Frame) -> None:
        self.got.append((asyncio.get_running_loop().time(), f.key))
        if len(self.got) >= self.expect:
            self.done.set()
        if f.key in self.fail:
            raise RuntimeError("receiver fault")

    @property
    def keys(self) -> list[ResultKey]:
        return [k for _, k in self.got]


def sender(receive: Receiver, policy: str = "fifo", **kw: Any) -> Sender:
    loop = asyncio.get_running_loop()
    return Sender(policy, link_bytes_per_s=RATE, framing_bytes=FRAMING, window=4,
                  clock=loop.time, receive=receive, **kw)


async def deliver_all(s: Sender, recv: Receiver, frames: list[Frame]) -> None:
    for f in frames:
        assert s.submit(f)
    await s.run()
    await asyncio.wait_for(recv.done.wait(), 60)


def test_fifo_delivers_back_to_back_at_the_paced_receipt_times() -> None:
    async def main() -> tuple[Receiver, Sender]:
        recv = Receiver(8)
        async with sender(recv) as s:
            await deliver_all(s, recv, [frame(i) for i in range(8)])
        return recv, s
    recv, s = run_virtual(main)
    assert recv.keys == [key(i) for i in range(8)]
    assert [t for t, _ in recv.got] == pytest.approx([HOP * k for k in range(1, 9)], abs=1e-6)
    commits = [s.timeline[key(i)].commit for i in range(8)]
    assert commits == pytest.approx([0, 0, 0, 0, HOP, 2 * HOP, 3 * HOP, 4 * HOP], abs=1e-6)
    assert s.stats[ENGINE].committed == 8


def test_cache_first_delivers_resident_histories_first() -> None:
    frames = [frame(i, resident=3 if i >= 5 else 0) for i in range(8)]

    async def main() -> Receiver:
        recv = Receiver(8)
        async with sender(recv, "cache_first") as s:
            await deliver_all(s, recv, frames)
        return recv
    recv = run_virtual(main)
    assert recv.keys == [key(i) for i in (5, 6, 7, 0, 1, 2, 3, 4)]
    assert [t for t, _ in recv.got] == pytest.approx([HOP * k for k in range(1, 9)], abs=1e-6)


def test_never_more_than_window_frames_in_flight() -> None:
    views: list[InventoryView] = []

    async def main() -> Sender:
        recv = Receiver(8)
        async with sender(recv, inventory_listener=views.append) as s:
            await s.run()
            for i in range(8):  # staggered readiness: decisions interleave with receipts
                s.submit(frame(i, ready_at=asyncio.get_running_loop().time()))
                await asyncio.sleep(0.3)
            await asyncio.wait_for(recv.done.wait(), 60)
        return s
    s = run_virtual(main)
    assert max(sum(e.committed for e in v.entries) for v in views) == 4
    assert [v.sequence for v in views] == sorted({v.sequence for v in views})
    times = list(s.timeline.values())
    for t in times:
        assert sum(1 for o in times if o.commit <= t.commit < o.receipt) <= 4


def test_submit_is_idempotent_per_key() -> None:
    async def main() -> tuple[Receiver, list[bool]]:
        recv = Receiver(2)
        async with sender(recv) as s:
            results = [s.submit(frame(1)), s.submit(frame(1))]
            with pytest.raises(ValueError, match="payload_digest"):
                s.submit(frame(1, fill=77))
            await deliver_all(s, recv, [frame(2)])
            results.append(s.submit(frame(1)))  # already delivered
        return recv, results
    recv, results = run_virtual(main)
    assert results == [True, False, False]
    assert recv.keys == [key(1), key(2)]


def test_withdrawn_frames_are_never_delivered() -> None:
    async def main() -> tuple[Receiver, list[bool]]:
        recv = Receiver(2)
        async with sender(recv) as s:
            for i in range(3):
                s.submit(frame(i))
            withdrawn = [s.withdraw(key(1)), s.withdraw(key(1))]
            await s.run()
            await asyncio.wait_for(recv.done.wait(), 60)
            withdrawn.append(s.withdraw(key(0)))  # already committed
            await asyncio.sleep(5)
        return recv, withdrawn
    recv, withdrawn = run_virtual(main)
    assert withdrawn == [True, False, False]
    assert recv.keys == [key(0), key(2)]


def test_a_failing_receive_does_not_stop_later_deliveries() -> None:
    async def main() -> tuple[Receiver, Sender]:
        recv = Receiver(5, fail=frozenset({key(1), key(2)}))
        async with sender(recv) as s:
            await deliver_all(s, recv, [frame(i) for i in range(5)])
        return recv, s
    recv, s = run_virtual(main)
    assert recv.keys == [key(i) for i in range(5)]
    assert s.stats[ENGINE].receive_errors == 2


def test_close_is_idempotent_and_leaves_no_task() -> None:
    async def main() -> tuple[int, Receiver]:
        recv = Receiver(99)
        s = sender(recv)
        await s.run()
        for i in range(6):
            s.submit(frame(i))
        await asyncio.sleep(1.5)  # one received, four in flight
        await s.close()
        await s.close()
        others = asyncio.all_tasks() - {asyncio.current_task()}
        assert not s.submit(frame(7))
        return len(others), recv
    left, recv = run_virtual(main)
    assert left == 0
    assert recv.keys == [key(0)]


def test_tail_aware_holds_until_a_completion_frees_the_engine() -> None:
    async def main() -> Sender:
        recv = Receiver(2)
        async with sender(recv, "tail_aware") as s:
            s.observe(budget(1, waiting=1, max_running=1))
            for i in range(2):
                s.submit(frame(i))
            await asyncio.sleep(0.5)
            assert s.stats[ENGINE].holds >= 1
            s.completed(key(0), 20)
            await asyncio.wait_for(recv.done.wait(), 60)
        return s
    s = run_virtual(main)
    assert s.timeline[key(1)].commit == pytest.approx(0.5)


def test_a_hold_lifts_when_the_budget_that_justified_it_goes_stale() -> None:
    async def main() -> Sender:
        recv = Receiver(2)
        async with sender(recv, "tail_aware") as s:
            s.observe(budget(1, waiting=1, max_running=1))
            for i in range(2):
                s.submit(frame(i))
            await asyncio.wait_for(recv.done.wait(), 60)
        return s
    s = run_virtual(main)
    assert 1.0 < s.timeline[key(1)].commit < 1.01


def test_the_inventory_view_shows_pending_and_in_flight_frames() -> None:
    async def main() -> InventoryView:
        recv = Receiver(99)
        async with sender(recv) as s:
            for i in range(6):
                s.submit(frame(i))
            await asyncio.sleep(0.5)
            return s.inventory_view(ENGINE)
    v = run_virtual(main)
    assert [(e.key, e.committed) for e in v.entries] == \
        [(key(i), i < 4) for i in range(6)]
    assert v.backlog_bytes == pytest.approx(4 * (FRAMING + 3000) - 0.5 * RATE, abs=1)
    assert (v.link_bytes_per_s, v.framing_bytes, v.published_at) == (RATE, FRAMING, 0.5)


def test_sender_refuses_a_bad_link_setting_by_name() -> None:
    with pytest.raises(ValueError, match="bytes_per_s"):
        Sender("fifo", link_bytes_per_s=0, receive=Receiver(1))
    with pytest.raises(ValueError, match="policy"):
        Sender("nope", link_bytes_per_s=1, receive=Receiver(1))


# -- the paced link -----------------------------------------------------------------------------

def test_link_transfers_are_serial_in_commit_order() -> None:
    link = PacedLink(RATE, FRAMING, window=8)
    receipts = [link.commit(frame(i), 0.0) for i in range(3)]
    assert receipts == pytest.approx([HOP, 2 * HOP, 3 * HOP])
    assert link.commit(frame(4), 10.0) == pytest.approx(10.0 + HOP)  # idle link starts at once
    assert link.next_receipt(10.0) == pytest.approx(10.0 + HOP)


def test_link_window_bounds_frames_not_yet_received() -> None:
    link = PacedLink(RATE, FRAMING, window=2)
    link.commit(frame(1), 0.0)
    link.commit(frame(2), 0.0)
    assert not link.has_room(0.5)
    with pytest.raises(RuntimeError, match="window"):
        link.commit(frame(3), 0.5)
    assert link.has_room(HOP)
    assert len(link.in_flight(HOP)) == 1


def test_link_backlog_counts_the_remainder_of_a_partly_sent_frame() -> None:
    link = PacedLink(RATE, FRAMING)
    link.commit(frame(1), 0.0)
    link.commit(frame(2, size=1000), 0.0)
    assert link.backlog_bytes(0.0) == pytest.approx(2 * FRAMING + 4000)
    assert link.backlog_bytes(0.5) == pytest.approx((FRAMING + 3000 - 2000) + FRAMING + 1000)
    assert link.backlog_bytes(10.0) == 0


@pytest.mark.parametrize(("args", "field"), [((0,), "bytes_per_s"), ((1, 10, 0), "window"),
                                             ((1, -1), "framing_bytes")])
def test_link_refuses_bad_settings_by_name(args: tuple, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        PacedLink(*args)


# -- the inventory ------------------------------------------------------------------------------

def test_inventory_keeps_fifo_order_and_positions() -> None:
    inv = Inventory()
    for f in (frame(3, ready_at=0.2), frame(1, ready_at=0.1), frame(2, ready_at=0.1)):
        assert inv.add(f)
    assert [f.key for f in inv] == [key(1), key(2), key(3)]
    assert inv.position(key(3)) == 2
    assert inv.remove(key(1)) is not None and inv.position(key(3)) == 1
    assert inv.remove(key(1)) is None


def test_inventory_add_is_idempotent_and_refuses_a_second_payload() -> None:
    inv = Inventory()
    assert inv.add(frame(1)) and not inv.add(frame(1))
    with pytest.raises(ValueError, match="payload_digest"):
        inv.add(frame(1, fill=42))
    assert len(inv) == 1


def test_a_frame_refuses_a_digest_that_does_not_match_its_payload() -> None:
    f = frame(1)
    with pytest.raises(ValueError, match="payload_digest"):
        Frame(f.key, f.engine_id, b"other", f.payload_digest, 0.0, 1, 0, f.prefix_digest)
