"""Complete receipt (``leases.receipts.Receipts``, LADS §3.6): a result's continuation runs once
per key whoever asks, another payload for the key is refused, a failed one is retried, and a
running one is never forgotten."""

from __future__ import annotations

import asyncio

import pytest

from services.common.values.errors import FailedPrecondition
from services.common.values.generation import FinishReason, Timings, Usage
from services.engine_agent.backend import Allocated, Finished
from services.engine_agent.leases.receipts import Receipts
from tests.engine_agent.leases.test_provider import key
from tests.engine_agent.sim_factories import make_request


class Backend:
    def __init__(self, fail_first: bool = False) -> None:
        self.runs, self.fail_first = 0, fail_first

    async def generate(self, request):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN201
        self.runs += 1
        if self.fail_first and self.runs == 1:
            raise RuntimeError("engine lost")
        await asyncio.sleep(0.01)
        yield Allocated(cached_prompt_tokens=0, queue_s=0.0)
        yield Finished(FinishReason.STOP, "ok", Usage(1, 0, 1), Timings(0, 0, 0, 0))


class Provider:
    def __init__(self) -> None:
        self.seen: list = []

    async def receipt(self, key, payload_digest, prefix_digest, request_id):  # type: ignore  # noqa
        return True

    async def allocated(self, key) -> None:  # type: ignore[no-untyped-def]  # noqa: ANN001
        self.seen.append(key)


async def test_a_continuation_runs_once_whoever_asks_and_another_payload_is_refused() -> None:
    backend, provider = Backend(), Provider()
    receipts = Receipts(backend, provider)  # type: ignore[arg-type]
    first, again = await asyncio.gather(
        receipts.receive(key(1), "p", "d", make_request("c1")),
        receipts.receive(key(1), "p", "d", make_request("c1")))
    assert first is again and first.bound and backend.runs == 1
    assert provider.seen == [key(1)] and receipts.registered(key(1), "p")
    with pytest.raises(FailedPrecondition, match="another payload"):
        await receipts.receive(key(1), "other", "d", make_request("c1"))
    await receipts.close()


async def test_a_failed_continuation_is_retried_not_replayed() -> None:
    backend = Backend(fail_first=True)
    receipts = Receipts(backend, Provider())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="engine lost"):
        await receipts.receive(key(2), "p", "d", make_request("c2"))
    assert not receipts.registered(key(2), "p")
    assert (await receipts.receive(key(2), "p", "d", make_request("c2"))).finished.text == "ok"
    assert backend.runs == 2


async def test_remembered_receipts_never_forget_a_running_continuation() -> None:
    from services.engine_agent.leases.receipts import Receipts

    receipts = Receipts(None, None, max_remembered=2)  # type: ignore[arg-type]
    running = asyncio.get_running_loop().create_future()
    done = asyncio.get_running_loop().create_future()
    done.set_result(None)
    receipts._remember(key(1), ("d", running))  # type: ignore[arg-type]
    receipts._remember(key(2), ("d", done))  # type: ignore[arg-type]
    receipts._remember(key(3), ("d", done))  # type: ignore[arg-type]
    assert receipts.remembered() == [key(1), key(3)]  # the finished oldest went, not the running
    running.cancel()
