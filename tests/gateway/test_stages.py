"""The canonical demand path (``stages.StageService``): speculation is called once per demand,
before the library, and learns the answer through what it returned; single-flight for identical
demands (``_execute``).

A demand whose exact reuse name is executing canonically right now, for the same tenant, waits
for that execution's answer instead of running again; it runs itself when that execution fails
or is cancelled, never past its own deadline, never across tenants, never for non-deterministic
sampling, and never with C1 off (the floor reuses nothing).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from services.common.values.errors import DeadlineExceeded, Unavailable
from services.common.values.generation import GenerationRequest, Sampling
from services.gateway.ports import Execution
from services.gateway.values import AnswerSource, Demand
from tests.gateway.local_ports import MODEL, Core, local_core

GREEDY = Sampling(max_tokens=48, temperature=0.0)


def _demand(tenant: str = "acme", sampling: Sampling = GREEDY,
            prompt: str = "Summarise the release notes in one line.") -> Demand:
    return Demand(tenant=tenant, request_id=uuid.uuid4().hex, model=MODEL, prompt=prompt,
                  sampling=sampling)


class _Counting:
    """Wraps the core's engines: counts generations; ``fail`` makes the next ones raise."""

    def __init__(self, core: Core) -> None:
        self.inner = core.engines.generate
        self.calls = 0
        self.fail = 0
        core.engines.generate = self.generate  # type: ignore[method-assign]

    async def generate(self, request: GenerationRequest, timeout_s: float, prefix_key: str = "",
                       on_delta: Callable[[str], None] | None = None) -> Execution:
        self.calls += 1
        if self.fail:
            self.fail -= 1
            await asyncio.sleep(0.02)
            raise Unavailable("engine lost")
        return await self.inner(request, timeout_s, prefix_key, on_delta)


@asynccontextmanager
async def _core(c1: bool = True) -> AsyncIterator[tuple[Core, _Counting]]:
    async with local_core(c1=c1, c2=False, engines=1, time_scale=0.02) as core:
        yield core, _Counting(core)


async def test_two_identical_concurrent_demands_cost_one_engine_execution() -> None:
    async with _core() as (core, engines):
        first, second = await asyncio.gather(core.stages.run(_demand(), 30),
                                             core.stages.run(_demand(), 30))
        assert engines.calls == 1
        assert {first.source, second.source} == {AnswerSource.ENGINE, AnswerSource.JOINED}
        assert first.text == second.text and first.reuse_name == second.reuse_name
        assert core.stages.single_flight.joined == 1
        third = await core.stages.run(_demand(), 30)  # after: the stored result
        assert third.source is AnswerSource.LIBRARY and engines.calls == 1


async def test_other_tenants_and_sampled_demands_never_join() -> None:
    async with _core() as (core, engines):
        sampled = Sampling(max_tokens=48, temperature=0.8)
        answers = await asyncio.gather(
            core.stages.run(_demand("acme"), 30), core.stages.run(_demand("globex"), 30),
            core.stages.run(_demand("acme", sampled), 30),
            core.stages.run(_demand("acme", sampled), 30))
        assert [a.source for a in answers[1:]] == [AnswerSource.ENGINE] * 3
        assert engines.calls == 4 and core.stages.single_flight.joined == 0


async def test_without_c1_identical_demands_each_run() -> None:
    async with _core(c1=False) as (core, engines):
        answers = await asyncio.gather(*(core.stages.run(_demand(), 30) for _ in range(2)))
        assert [a.source for a in answers] == [AnswerSource.ENGINE] * 2 and engines.calls == 2


async def test_a_failed_first_execution_leaves_the_waiter_to_run_itself() -> None:
    async with _core() as (core, engines):
        engines.fail = 1
        first = asyncio.create_task(core.stages.run(_demand(), 30))
        await asyncio.sleep(0.005)
        second = await core.stages.run(_demand(), 30)
        with pytest.raises(Unavailable):
            await first
        assert second.source is AnswerSource.ENGINE and engines.calls == 2


async def test_a_cancelled_first_execution_leaves_the_waiter_to_run_itself() -> None:
    async with _core() as (core, engines):
        first = asyncio.create_task(core.stages.run(_demand(), 30))
        await asyncio.sleep(0.005)
        second = asyncio.create_task(core.stages.run(_demand(), 30))
        await asyncio.sleep(0.005)
        first.cancel()
        answer = await second
        assert first.cancelled() and answer.source is AnswerSource.ENGINE and engines.calls == 2
        assert answer.text == (await core.stages.run(_demand(), 30)).text


async def test_a_waiter_never_waits_past_its_own_deadline() -> None:
    async with _core() as (core, engines):
        long = Sampling(max_tokens=400, temperature=0.0)
        first = asyncio.create_task(core.stages.run(_demand(sampling=long), 30))
        await asyncio.sleep(0.005)
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(DeadlineExceeded):
            await core.stages.run(_demand(sampling=long), 0.05)
        assert loop.time() - start < 1.0
        assert (await first).source is AnswerSource.ENGINE and engines.calls == 1


class _Spec:
    """A ``ports.Speculation`` that serves nothing and records what the demand path told it."""

    served = None

    def __init__(self) -> None:
        self.claims: list[float] = []
        self.answers: list[str] = []

    async def claim_elsewhere(self, timeout_s: float):  # type: ignore[no-untyped-def]  # noqa: ANN201
        self.claims.append(timeout_s)

    def answered(self, text: str) -> None:
        self.answers.append(text)


class _Speculation:
    def __init__(self) -> None:
        self.calls: list[Demand] = []
        self.confirmed_names: list[object] = []
        self.spec = _Spec()

    async def speculate(self, d: Demand, name, timeout_s: float, stream=None) -> _Spec:  # type: ignore  # noqa
        self.calls.append(d)
        return self.spec

    def confirmed(self, name) -> None:  # type: ignore  # noqa
        self.confirmed_names.append(name)


async def test_speculation_is_called_once_per_demand_and_told_the_answer() -> None:
    from tests.gateway.local_ports import routing_demand

    async with local_core(c1=True, c2=True, engines=1) as core:
        speculation = _Speculation()
        core.stages.speculation = speculation  # type: ignore[assignment]
        d = routing_demand("acme", "wf-1", "router", {
            "functions": json.dumps([{"name": "get_weather"}]), "query": "Weather in Oslo?"})
        answer = await core.stages.run(d, 30.0)
        assert len(speculation.calls) == 1 and speculation.calls[0].stage is not None
        assert speculation.spec.claims == [30.0]  # a library miss: another replica may hold it
        assert speculation.spec.answers == [answer.text]
        await core.stages.close()  # the store ran: adopters of the name are told
        assert [str(n) for n in speculation.confirmed_names] == [answer.reuse_name]
        untagged = await core.stages.run(_demand(), 30.0)  # not a template stage: no call
        assert len(speculation.calls) == 1 and untagged.source is AnswerSource.ENGINE
