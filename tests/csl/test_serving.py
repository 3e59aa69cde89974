"""A shard's serving lease (``serving.ServingLease``): serving only from a granted renewal until
``lease_s`` after it began, one grant per token, none across incarnations or after expiry; a
library that is not a shard always serves; the async library misses while not serving."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common.values.errors import FailedPrecondition, InvalidArgument
from services.common.values.reads import ReadSet
from services.common.values.reuse_name import StageFingerprint, reuse_name
from services.csl.async_library import AsyncSubgraphLibrary
from services.csl.core import LibraryOptions, SubgraphLibrary
from services.csl.serving import ServingLease


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_library_that_is_not_a_shard_always_serves() -> None:
    lease = ServingLease(0.0)
    assert lease.serving() and lease.left_s() == -1 and not lease.leased
    with pytest.raises(FailedPrecondition, match="not a leased shard"):
        lease.begin()


def test_a_shard_serves_from_a_grant_until_lease_s_after_its_renewal_began() -> None:
    clock = Clock()
    lease = ServingLease(1.0, clock, incarnation="i1")
    assert not lease.serving() and not lease.established
    token = lease.begin()
    clock.now += 0.3  # the peers' changes are copied in meanwhile
    assert lease.grant("i1", token) == pytest.approx(0.7)
    assert lease.serving() and lease.established
    clock.now += 0.69
    assert lease.serving()
    clock.now += 0.02
    assert not lease.serving() and lease.counters.lapses == 1
    assert lease.established  # once granted in this incarnation


def test_grants_are_refused_for_another_incarnation_a_used_token_and_a_late_one() -> None:
    clock = Clock()
    lease = ServingLease(1.0, clock, incarnation="i2")
    token = lease.begin()
    with pytest.raises(FailedPrecondition, match="restarted"):
        lease.grant("i1", token)
    lease.grant("i2", token)
    with pytest.raises(FailedPrecondition, match="unknown or already granted"):
        lease.grant("i2", token)
    late = lease.begin()
    clock.now += 1.5
    with pytest.raises(FailedPrecondition, match="longer than the lease"):
        lease.grant("i2", late)
    assert lease.counters.refused == 3 and lease.counters.granted == 1


def test_an_older_grant_never_shortens_the_lease() -> None:
    clock = Clock()
    lease = ServingLease(1.0, clock)
    old = lease.begin()
    clock.now += 0.5
    new = lease.begin()
    lease.grant(lease.incarnation, new)
    lease.grant(lease.incarnation, old)  # arrives last
    assert lease.left_s() == pytest.approx(1.0)


def test_the_lease_is_bounded() -> None:
    with pytest.raises(InvalidArgument, match="serving_lease_s"):
        ServingLease(-1.0)


async def test_the_async_library_misses_while_not_serving(tmp_path: Path) -> None:
    clock = Clock()
    lease = ServingLease(1.0, clock)
    library = AsyncSubgraphLibrary(SubgraphLibrary(tmp_path / "csl", LibraryOptions(sync=False)),
                                   lease=lease)
    name = reuse_name("t", StageFingerprint("wf", "s", 1, "m", max_tokens=8), b"x")
    try:
        assert await library.put(name, b"answer", ReadSet((), True))  # stores are not gated
        assert library.lookup(name) is None and lease.counters.unserved == 1
        lease.grant(lease.incarnation, lease.begin())
        assert library.lookup(name) is not None
        clock.now += 2
        assert library.lookup(name) is None
        assert await library.promote(name, "b1") is None
        assert lease.counters.unserved == 3
    finally:
        await library.close()


def test_the_lease_is_exported_as_metrics(tmp_path: Path) -> None:
    from services.csl.servicer import LibraryCollector

    clock = Clock()
    lease = ServingLease(1.0, clock)
    with SubgraphLibrary(tmp_path / "csl", LibraryOptions(sync=False)) as library:
        lease.grant(lease.incarnation, lease.begin())
        metrics = {m.name: m.samples[0].value for m in LibraryCollector(library, lease).collect()}
    assert metrics["dynbranch_csl_serving_left_seconds"] == pytest.approx(1.0)
    assert metrics["dynbranch_csl_lease_granted"] == 1
    assert metrics["dynbranch_csl_lease_begun"] == 1
