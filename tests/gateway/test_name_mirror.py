"""The gateway's name mirror saves the Lookup hop on misses and never hides a hit."""

from __future__ import annotations

import asyncio

from services.common.pb import gateway_pb2
from services.common.values.reuse_name import ReuseName
from services.gateway.adapters.name_mirror import NameMirror
from services.gateway.sdk import DynbranchClient
from tests.csl.factories import name
from tests.factories import gateway
from tests.gateway.mesh import MODEL, mesh


def test_unsynced_mirror_holds_everything_and_a_gap_resets_it() -> None:
    mirror = NameMirror()
    assert mirror.may_hold(name(1))
    assert mirror.apply(0, [], [], synced=True) and not mirror.may_hold(name(1))
    mirror.add(name(1))
    assert mirror.may_hold(name(1))
    assert not mirror.apply(5, [], [], synced=True)  # gap
    assert not mirror.synced and mirror.may_hold(name(2))


async def _until(predicate, timeout_s: float = 3.0) -> None:  # noqa: ANN001
    for _ in range(int(timeout_s / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def test_misses_skip_the_lookup_and_entries_stored_elsewhere_still_hit() -> None:
    async with mesh(c2=False) as m:
        library = m.gateway.core.library
        await _until(lambda: library.mirror.synced)
        first = await m.client.call("a question nobody asked", MODEL, max_tokens=8)
        assert first.source == gateway_pb2.RESULT_SOURCE_ENGINE
        assert library.mirror.skipped == 1
        async with gateway([m.engines[0].address], csl=m.csl.address, c2=False) as other:
            async with DynbranchClient(other.address) as client:
                stored = await client.call("stored by another gateway", MODEL, max_tokens=8)
            await other.core.stages.close()  # its store has landed
        await _until(lambda: library.mirror.may_hold(_name(stored.reuse_name)) and
                     len(library.mirror) >= 2)
        again = await m.client.call("stored by another gateway", MODEL, max_tokens=8)
        assert again.source == gateway_pb2.RESULT_SOURCE_LIBRARY and again.text == stored.text


def _name(text: str) -> ReuseName:
    tenant, _, digest = text.rpartition("/")
    return ReuseName("" if tenant == "<shared>" else tenant, digest)
