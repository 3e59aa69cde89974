"""The lease provider's book (``leases.book.LeaseBook``): tracking a pending result with its
resident prefix, whole-prefix grants published as versioned records, release accounted once,
and state the provider reads but cannot assign (a read-only pending view)."""

from __future__ import annotations

import pytest

from services.common.values.leases import LeaseRecord, LeaseState
from services.engine_agent.leases.book import LeaseBook
from services.engine_agent.leases.budget import Budget
from services.engine_agent.leases.state import LeaseSettings
from tests.engine_agent.leases.test_provider import Clock, key, warm
from tests.engine_agent.sim_factories import make_backend, small_preset


async def test_a_grant_leases_the_whole_prefix_and_a_release_is_counted_once() -> None:
    backend = make_backend(small_preset(num_kv_blocks=64, max_model_len=1024, max_running=4))
    book = LeaseBook(backend, engine_id="e0", tokenize=backend.tokenize,
                     settings=LeaseSettings(lifetime_s=8.0, headroom_blocks=4), clock=Clock())
    records: list = []
    book.subscribe(records.append)
    history = await warm(backend, "a", 96)
    pending = await book.track(key(1), history, "digest")
    assert pending.prefix.block_ids and book.get(key(1)) is pending
    assert await book.grant(pending)
    assert book.protected == len(pending.prefix.block_ids)
    [granted] = [r for r in records if isinstance(r, LeaseRecord)]
    assert granted.state is LeaseState.ACTIVE and granted.blocks == len(pending.prefix.block_ids)
    await book.end_lease(pending, LeaseState.RELEASED)
    book.account_release(pending.lease.lease_id)  # a second path: not counted again
    assert book.stats.added_refs == book.stats.released_refs == len(pending.prefix.block_ids)
    assert records[-1].state is LeaseState.RELEASED and records[-1].sequence > granted.sequence
    assert await backend.lease_refs() == {}
    await backend.close()


async def test_the_provider_sets_the_budget_through_methods_and_reads_a_view() -> None:
    backend = make_backend(small_preset(num_kv_blocks=64, max_model_len=1024, max_running=4))
    book = LeaseBook(backend, engine_id="e0", tokenize=backend.tokenize,
                     settings=LeaseSettings(), clock=Clock())
    book.set_budget(Budget(4, 10, 4, 4))
    assert book.budget.target == 4
    with pytest.raises(TypeError):
        book.pending[key(1)] = None  # type: ignore[index]
    history = await warm(backend, "b", 96)
    pending = await book.track(key(2), history, "d")
    await book.grant(pending)
    await book.release_all()
    assert dict(book.pending) == {} and await backend.lease_refs() == {}
    await backend.close()
