"""Delivery's per-result tables are bounded and say what happens when full."""

from __future__ import annotations

import asyncio
import functools
import time

import pytest

from services.common.values.errors import ResourceExhausted
from services.common.values.leases import ResultKey
from services.delivery.config import DeliverySettings
from services.delivery.core import DeliveryCore
from services.delivery.frames import Frame
from services.delivery.policies import MAX_TOOLS, Choice, TailAwarePolicy
from services.delivery.sender import Sender
from tests.delivery.test_core import ENGINE, FakePort, tool_result


async def test_results_past_max_pending_are_refused_and_room_returns_when_they_finish() -> None:
    port = FakePort()
    port.gate = asyncio.Event()  # readiness holds: every result stays pending
    make = functools.partial(Sender, "fifo", link_bytes_per_s=1e6, clock=time.time)
    core = DeliveryCore({ENGINE: port}, make, max_pending=3)
    await core.start()
    try:
        held = [asyncio.create_task(core.deliver(tool_result(turn))) for turn in range(3)]
        await asyncio.sleep(0.01)
        with pytest.raises(ResourceExhausted, match="max_pending_results"):
            await core.deliver(tool_result(99))
        again = asyncio.create_task(core.deliver(tool_result(1)))  # a duplicate joins its twin
        port.gate.set()
        done = await asyncio.gather(*held, again)
        assert done[1] == done[3]
        assert (await core.deliver(tool_result(99))).received.text == "after p"
    finally:
        await core.close()


def test_delivery_settings_take_the_pending_bound() -> None:
    assert DeliverySettings().max_pending_results == 4096
    assert DeliverySettings(max_pending_results=8).max_pending_results == 8


def _commit_and_complete(policy: TailAwarePolicy, turn: int, tool: str) -> None:
    frame = Frame.build(ResultKey("wf", turn), ENGINE, b"x", ready_at=0.0, prompt_tokens=4,
                        resident_blocks=0, prefix_digest="p", tool=tool)
    policy.on_commit(Choice(frame))
    policy.on_complete(frame.key, 10)


def test_tail_aware_keeps_a_bounded_number_of_per_tool_means() -> None:
    policy = TailAwarePolicy()
    for turn in range(MAX_TOOLS + 50):
        _commit_and_complete(policy, turn, f"tool-{turn}")
    assert len(policy._sums) <= MAX_TOOLS + 2  # noqa: SLF001 - the table itself is the subject
    assert policy.expected_output("tool-never-seen") == 10.0  # the all-tools mean still learns
    assert policy.ledger == 0
