"""Single-flight (``reuse.single_flight.SingleFlight``): identical demands share one execution;
a demand runs itself when the one it joined fails or read a record written since, and waits no
longer than its own deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from services.common.values.errors import DeadlineExceeded, Unavailable
from services.common.values.generation import FinishReason, Timings, Usage
from services.common.values.reads import ReadSet
from services.common.values.reuse_name import StageFingerprint, reuse_name
from services.gateway.execution import StageRun
from services.gateway.reuse.freshness import Freshness
from services.gateway.reuse.single_flight import SingleFlight
from services.gateway.values import StoredResult

NAME = reuse_name("acme", StageFingerprint("t", "s", 1, "m"), b"input")
KEY = ("acme", NAME)


def _run(text: str = "answer", reads: tuple[tuple[str, int], ...] = ()) -> StageRun:
    stored = StoredResult(text, FinishReason.STOP, Usage(1, 0, 1), reads)
    return StageRun(stored, ReadSet.pure(), 1.0, Timings(0.0, 0.0, 0.0, 1.0), "e0")


class _Runs:
    """Executions that end when released (``fail``: by raising)."""

    def __init__(self, result: StageRun | None = None) -> None:
        self.started = 0
        self.release = asyncio.Event()
        self.result = result or _run()

    async def __call__(self, timeout_s: float) -> StageRun:
        self.started += 1
        await self.release.wait()
        if self.result.stored.text == "fail":
            raise Unavailable("the engine went away")
        return self.result


async def test_an_identical_demand_joins_the_execution_running_now() -> None:
    flight, runs = SingleFlight(Freshness({})), _Runs()
    first = asyncio.create_task(flight.join_or_run(KEY, runs, 5.0))
    await asyncio.sleep(0)
    assert flight.running(*KEY) is not None
    second = asyncio.create_task(flight.join_or_run(KEY, runs, 5.0))
    await asyncio.sleep(0)
    runs.release.set()
    assert (await first)[1] is False and (await second)[1] is True
    assert runs.started == 1 and flight.joined == 1 and flight.running(*KEY) is None


async def test_a_demand_runs_itself_when_the_execution_it_joined_fails() -> None:
    flight, failing, own = SingleFlight(Freshness({})), _Runs(_run("fail")), _Runs()
    first = asyncio.create_task(flight.join_or_run(KEY, failing, 5.0))
    await asyncio.sleep(0)
    second = asyncio.create_task(flight.join_or_run(KEY, own, 5.0))
    await asyncio.sleep(0)
    own.release.set()
    failing.release.set()
    with pytest.raises(Unavailable):
        await first
    run, joined = await second
    assert not joined and own.started == 1 and flight.joined == 0


class _Stale:
    name = "retrieve"

    async def reads_current(self, reads: Sequence[tuple[str, int]]) -> bool:
        return False


async def test_a_run_that_read_a_record_written_since_is_not_taken() -> None:
    flight = SingleFlight(Freshness({"retrieve": _Stale()}))  # type: ignore[dict-item]
    done: asyncio.Future[StageRun | None] = asyncio.get_running_loop().create_future()
    done.set_result(_run(reads=(("corpus/wiki/doc/oslo", 1),)))
    assert await flight.identical_run(done, 1.0) is None


async def test_waiting_for_an_identical_execution_ends_at_the_demand_s_deadline() -> None:
    flight, runs = SingleFlight(Freshness({})), _Runs()
    first = asyncio.create_task(flight.join_or_run(KEY, runs, 5.0))
    await asyncio.sleep(0)
    with pytest.raises(DeadlineExceeded):
        await flight.join_or_run(KEY, runs, 0.01)
    runs.release.set()
    await first
