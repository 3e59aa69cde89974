"""``Deadlines``: many waits' deadlines on one loop timer expire each wait at its deadline, never
one that ended first, and the heap stays bounded by the waits in flight."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.meshes.virtual import run_virtual
from services.common.runtime.deadlines import Deadline, Deadlines


def test_a_future_fails_with_timeout_at_its_deadline_and_a_cancelled_one_never() -> None:
    async def main() -> tuple[float, bool, int]:
        loop = asyncio.get_running_loop()
        deadlines = Deadlines()
        late: asyncio.Future[int] = loop.create_future()
        kept: asyncio.Future[int] = loop.create_future()
        start = loop.time()
        deadlines.expire_future(late, 2.0)
        kept_deadline = deadlines.expire_future(kept, 1.0)
        kept.set_result(7)
        deadlines.cancel(kept_deadline)
        try:
            await late
        except TimeoutError:
            waited = loop.time() - start
        await asyncio.sleep(5)
        return waited, kept.exception() is None, len(deadlines)

    waited, kept_ok, pending = run_virtual(main)
    assert waited == pytest.approx(2.0, abs=1e-9)
    assert kept_ok and pending == 0


def test_an_earlier_deadline_added_later_rearms_the_timer() -> None:
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        deadlines = Deadlines()
        fired: list[tuple[str, float]] = []
        deadlines.after(loop, 10.0, lambda: fired.append(("late", loop.time())))
        deadlines.after(loop, 3.0, lambda: fired.append(("early", loop.time())))
        await asyncio.sleep(11)
        return fired

    assert run_virtual(main) == [("early", pytest.approx(3.0)), ("late", pytest.approx(10.0))]


def test_an_expiry_may_add_and_cancel_deadlines() -> None:
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        deadlines = Deadlines()
        fired: list[str] = []
        others: list[Deadline] = []

        def first() -> None:
            fired.append("first")
            deadlines.cancel(others[0])  # due at the same instant: never expires
            deadlines.after(loop, 1.0, lambda: fired.append("added"))

        deadlines.after(loop, 1.0, first)
        others.append(deadlines.after(loop, 1.0, lambda: fired.append("cancelled")))
        await asyncio.sleep(5)
        return fired

    assert run_virtual(main) == ["first", "added"]


# One step: add a deadline (its delay in half seconds), cancel the i-th added, or let time pass.
_STEPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 20)),
    st.tuples(st.just("cancel"), st.integers(0, 200)),
    st.tuples(st.just("sleep"), st.integers(0, 6))), max_size=300)


@settings(max_examples=60, deadline=None)
@given(_STEPS)
def test_every_wait_expires_at_its_deadline_unless_it_ended_first(steps: list[Any]) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        deadlines = Deadlines()
        due: list[float] = []
        handles: list[Deadline] = []
        cancelled_at: dict[int, float] = {}
        fired: dict[int, float] = {}
        for op, arg in steps:
            if op == "add":
                i = len(due)
                due.append(loop.time() + arg / 2)
                handles.append(deadlines.after(loop, arg / 2,
                                               lambda i=i: fired.setdefault(i, loop.time())))
            elif op == "cancel" and handles:
                i = arg % len(handles)
                deadlines.cancel(handles[i])
                cancelled_at.setdefault(i, loop.time())
            else:
                await asyncio.sleep(arg / 4)
            pending = sum(1 for i in range(len(due)) if i not in fired and i not in cancelled_at)
            assert len(deadlines) == pending
            assert len(deadlines._heap) <= 2 * pending + 65  # finished entries are dropped
        await asyncio.sleep(11)
        for i, when in enumerate(due):
            if i in fired:  # at its deadline, and only if it had not ended first
                assert fired[i] == pytest.approx(when, abs=1e-9)
                assert cancelled_at.get(i, when) >= when
            else:  # never expired: it ended before its deadline
                assert cancelled_at[i] <= when
        assert len(deadlines) == 0

    run_virtual(main)
