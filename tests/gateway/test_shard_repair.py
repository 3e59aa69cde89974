"""The freshness protocol over shards (``shard_repair.py``) against a model of the network: the
gateway's own write path (``ShardedLibrary.write_records``) and renewals (``renew``) drive shards
made of the csl's own version table and serving lease, over links that are cut one-sidedly
(one gateway and one shard), lose requests and answers, and delay them; shards go down and come
back, restart on their own copy or on an older one, and a mesh may start with one shard absent
(founded from the other two). After every acknowledged write, no shard that serves (its lease
checked first, as the csl does) holds an older version of what was written: the invariant of
DESIGN.md §5.3, on virtual time so leases and commit waits cost nothing."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any
from unittest import mock

import grpc
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from loadgen.meshes.virtual import run_virtual
from services.common.pb import csl_pb2
from services.common.values.errors import FailedPrecondition, Unavailable
from services.common.values.reads import RecordRead, WriteOutcome
from services.csl.serving import ServingLease
from services.csl.versions import VersionTable
from services.gateway.adapters import sharded_library
from services.gateway.adapters.shard_repair import (
    Cursors,
    WriteTally,
    commit_wait_s,
    first_vouchers,
    quorum,
    renew,
    steady_vouchers,
)
from services.gateway.adapters.sharded_library import ShardedLibrary

LEASE_S, DEADLINE_S = 0.2, 0.05
SHARDS, GATEWAYS, RECORDS = 3, 2, ("r0", "r1")


def _rpc_error(code: grpc.StatusCode, details: str = "") -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class FakeShard:
    """A shard: the csl's version table (with its change feed) and serving lease."""

    def __init__(self, index: int, rate: float, up: bool = True) -> None:
        self.index, self.rate = index, rate
        self.table = VersionTable()
        self.up = up
        self.lease = self._lease()
        #: Restarted on an older copy and not yet granted since (the one fault allowed).
        self.amnesiac = False

    def _lease(self) -> ServingLease:
        loop = asyncio.get_running_loop()
        return ServingLease(LEASE_S, clock=lambda: loop.time() * self.rate)

    def snapshot(self) -> VersionTable:
        return VersionTable(dict(self.table.since(0, 10**9)), self.table.seq)

    def restart(self, copy: VersionTable | None) -> None:
        self.lease = self._lease()  # a new incarnation, not serving
        if copy is not None:
            self.table, self.amnesiac = copy, True

    def write(self, record_ids: list[str], version: int) -> WriteOutcome:  # csl, exact
        if not self.lease.established:
            raise FailedPrecondition("not caught up since it started")
        prior = self.table.seq
        if version <= prior:
            return WriteOutcome((), 0, prior, refused=True)
        for r in record_ids:
            self.table.adopt(("", r), version)
        return WriteOutcome(tuple(RecordRead(r, version) for r in record_ids), 0, prior)


class Net:
    """Links gateway -> shard: cut ones drop everything, others lose and delay at random."""

    def __init__(self, rng: random.Random, loss: float) -> None:
        self.rng, self.loss = rng, loss
        self.cut: set[tuple[int, int]] = set()

    async def call(self, gateway: int, shard: FakeShard, apply: Callable[[], Any]) -> Any:
        if not shard.up:
            raise _rpc_error(grpc.StatusCode.UNAVAILABLE, "connection refused")
        start = asyncio.get_running_loop().time()
        await asyncio.sleep(self.rng.uniform(0, 0.004))
        if self._dropped(gateway, shard):
            await asyncio.sleep(DEADLINE_S)
            raise _rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED)
        try:
            result = apply()
        except FailedPrecondition as exc:
            raise _rpc_error(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from None
        await asyncio.sleep(self.rng.uniform(0, 0.004))
        if self._dropped(gateway, shard):  # applied, but the answer is lost
            await asyncio.sleep(max(0.0, start + DEADLINE_S - asyncio.get_running_loop().time()))
            raise _rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED)
        return result

    def _dropped(self, gateway: int, shard: FakeShard) -> bool:
        return (gateway, shard.index) in self.cut or self.rng.random() < self.loss or not shard.up


class FakeClient:
    """The csl client calls the protocol makes, from one gateway to one shard."""

    def __init__(self, gateway: int, shard: FakeShard, net: Net) -> None:
        self.gateway, self.shard, self.net = gateway, shard, net
        self.target = f"shard-{shard.index}"

    def _call(self, apply: Callable[[], Any]) -> Any:
        return self.net.call(self.gateway, self.shard, apply)

    async def write_records(self, tenant: str, record_ids: Any, timeout_s: float,
                            floors: Any = (), version: int = 0) -> WriteOutcome:
        return await self._call(lambda: self.shard.write(list(record_ids), version))

    async def changes(self, after: int, timeout_s: float, limit: int = 0
                      ) -> csl_pb2.ChangesResponse:
        def page() -> csl_pb2.ChangesResponse:
            versions, cursor, more = self.shard.table.changed_since(after, limit or 1024)
            return csl_pb2.ChangesResponse(
                incarnation=self.shard.lease.incarnation, next=cursor, more=more,
                established=self.shard.lease.established,
                versions=[csl_pb2.TenantRecordVersion(tenant=t, record_id=r, version=v)
                          for (t, r), v in versions])
        return await self._call(page)

    async def adopt_versions(self, versions: Any, timeout_s: float) -> int:
        return await self._call(lambda: sum(self.shard.table.adopt(k, v) for k, v in versions))

    async def begin_renewal(self, timeout_s: float) -> csl_pb2.BeginRenewalResponse:
        def begin() -> csl_pb2.BeginRenewalResponse:
            lease = self.shard.lease
            return csl_pb2.BeginRenewalResponse(incarnation=lease.incarnation,
                                                token=lease.begin(), serving_lease_s=LEASE_S,
                                                established=lease.established)
        return await self._call(begin)

    async def grant_serving(self, incarnation: str, token: int, peers: int,
                            timeout_s: float) -> float:
        def grant() -> float:
            left = self.shard.lease.grant(incarnation, token)
            self.shard.amnesiac = False
            return left
        return await self._call(grant)

    async def close(self) -> None:
        pass


class Remote:
    """Stands in for ``RemoteLibrary``: the protocol only uses its client."""

    def __init__(self, client: FakeClient) -> None:
        self.client = client

    def available(self) -> bool:
        return True

    async def close(self) -> None:
        pass


WRITE = st.tuples(st.just("write"), st.integers(0, GATEWAYS - 1), st.sampled_from(RECORDS))
READ = st.tuples(st.just("read"), st.integers(0, GATEWAYS - 1), st.sampled_from(RECORDS))
CUT = st.tuples(st.just("cut"), st.integers(0, GATEWAYS - 1), st.integers(0, SHARDS - 1))
STEP = st.one_of(
    WRITE, WRITE, READ, READ, READ,
    st.tuples(st.just("renew"), st.integers(0, GATEWAYS - 1), st.integers(0, SHARDS - 1)),
    st.tuples(st.just("renew_all"), st.integers(0, GATEWAYS - 1)),
    st.tuples(st.just("renew_all"), st.integers(0, GATEWAYS - 1)),
    CUT, CUT, CUT,
    st.tuples(st.just("heal"), st.integers(0, GATEWAYS - 1), st.integers(0, SHARDS - 1)),
    st.tuples(st.just("restart"), st.integers(0, SHARDS - 1), st.integers(0, 3)),
    st.tuples(st.just("down"), st.integers(0, SHARDS - 1)),
    st.tuples(st.just("up"), st.integers(0, SHARDS - 1)),
    st.tuples(st.just("sleep"), st.sampled_from([0.001, 0.01, 0.05, 0.15, 0.3])),
)


async def _run(steps: list[tuple[Any, ...]], seed: int, loss: float,
               absent: int | None = None) -> dict[str, int]:
    """Run ``steps`` on a mesh whose shards all started (or all but ``absent``, which is down
    until an ``up`` step)."""
    rng = random.Random(seed)
    net = Net(rng, loss)
    shards = [FakeShard(i, rng.uniform(0.996, 1.004), up=i != absent) for i in range(SHARDS)]
    with mock.patch.object(sharded_library, "RemoteLibrary",
                           lambda target, *a: Remote(FakeClient(0, shards[0], net))):
        libs = [ShardedLibrary([f"shard-{i}" for i in range(SHARDS)], deadline_s=DEADLINE_S,
                               serving_lease_s=LEASE_S) for _ in range(GATEWAYS)]
    for g, lib in enumerate(libs):
        for shard in lib.shards:
            shard.remote = Remote(FakeClient(g, shards[shard.index], net))  # type: ignore
    loop = asyncio.get_running_loop()
    acked: dict[str, list[tuple[float, int]]] = {r: [] for r in RECORDS}
    tasks: list[asyncio.Task[None]] = []
    tally = {"acked": 0, "failed": 0, "reads": 0, "served": 0}

    async def write(g: int, record: str) -> None:
        began = loop.time()
        try:
            (version,) = await libs[g].write_records("", [record])
        except Unavailable:
            tally["failed"] += 1
            return
        # One version names one write, and a write begun after another's acknowledgement is
        # numbered above it (what lets a shard take a higher version as the write it lacks).
        assert version not in [v for _, v in acked[record]], f"two writes at {record}@{version}"
        before = [v for at, v in acked[record] if at < began]
        assert version > max(before, default=0), f"{record}@{version} after {max(before)}"
        acked[record].append((loop.time(), version))
        tally["acked"] += 1

    def read(g: int, record: str) -> None:
        now = loop.time()
        floor = max([v for at, v in acked[record] if at <= now], default=0)
        for shard in shards:
            if (g, shard.index) in net.cut or not shard.up:
                continue
            tally["reads"] += 1
            if shard.lease.serving():  # checked before the read, as the csl does
                tally["served"] += 1
                held = shard.table.version(("", record))
                assert held >= floor, (f"stale: shard {shard.index} serves {record}@{held} "
                                       f"after a write at {floor} was acknowledged")

    try:
        await _steps(steps, libs, shards, net, rng, tasks, write, read)
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for record in RECORDS:
        for g in range(GATEWAYS):
            read(g, record)
    return tally


async def _steps(steps: list[tuple[Any, ...]], libs: list[ShardedLibrary],
                 shards: list[FakeShard], net: Net, rng: random.Random,
                 tasks: list[asyncio.Task[None]], write: Any, read: Any) -> None:
    snapshots: list[list[VersionTable]] = [[] for _ in shards]
    await asyncio.gather(*(lib.renew_all() for lib in libs))  # a mesh that is running
    for step in steps:
        for i, shard in enumerate(shards):
            snapshots[i].append(shard.snapshot())
        match step:
            case ("write", g, record):
                tasks.append(asyncio.create_task(write(g, record)))
            case ("renew", g, s):
                tasks.append(asyncio.create_task(libs[g]._renew(libs[g].shards[s])))
            case ("renew_all", g):  # a round of the gateway's renewal loop
                tasks.append(asyncio.create_task(libs[g].renew_all()))
            case ("read", g, record):
                read(g, record)
            case ("cut", g, s):
                net.cut.add((g, s))
            case ("heal", g, s):
                net.cut.discard((g, s))
            case ("down", s):
                shards[s].up = False
            case ("up", s) if not shards[s].up:  # a process started again on its own store
                shards[s].restart(None)
                shards[s].up = True
            case ("restart", s, age):  # 0: on its own copy; 1-3: the oldest .. a recent one
                copies = snapshots[s]
                amnesia = age and not any(x.amnesiac for x in shards)  # one fault at a time
                shards[s].restart(copies[len(copies) * (age - 1) // 3] if amnesia else None)
            case ("sleep", dt):
                await asyncio.sleep(dt)
        await asyncio.sleep(0)


#: A renewer that reaches none of a shard's peers must not grant it (the shard missed a write
#: from the gateway cut off from it): a steady grant needs an established peer.
NO_PEERS = [("cut", 0, 0), ("cut", 1, 1), ("cut", 1, 2), ("write", 0, "r0"), ("sleep", 0.3),
            ("renew", 1, 0), ("sleep", 0.15), ("read", 1, "r0")]
#: A shard restarted on a copy older than an acknowledged write must not be granted from the
#: one peer that missed that write: a first grant needs one peer more.
OLD_COPY = [("cut", 0, 2), ("write", 0, "r0"), ("sleep", 0.3), ("restart", 0, 1),
            ("cut", 1, 1), ("renew", 1, 0), ("sleep", 0.15), ("read", 1, "r0")]

#: A shard restarted on an older copy must not take a write numbered by its writer before it
#: caught up: it could give a version an acknowledged write already holds to another one.
AMNESIAC_WRITE = [("cut", 0, 2), ("write", 0, "r0"), ("sleep", 0.3), ("restart", 1, 1),
                  ("write", 1, "r0"), ("sleep", 0.3)]
#: Two shards that look new, where the third, holding the write, is down, must not found a mesh:
#: one restarted on its own copy from before the write, the other on its oldest copy (taken
#: before any write, but after it first served: the served mark tells it from a new one).
UNMARKED_COPY = [("cut", 0, 2), ("write", 0, "r0"), ("sleep", 0.3), ("restart", 2, 0),
                 ("restart", 0, 1), ("down", 1), ("renew_all", 1), ("sleep", 0.05),
                 ("read", 1, "r0")]
#: Shard 2, absent at start-up, joined; later restarted on its copy from then (before it first
#: served: it looks new): its first grant still needs both peers, not just the one that missed
#: a write it had applied (the peer holding it cut off from the renewer).
LOST_VOLUME = [("up", 2), ("renew_all", 0), ("renew_all", 1), ("sleep", 0.1), ("cut", 0, 1),
               ("write", 0, "r0"), ("sleep", 0.3), ("restart", 2, 1), ("cut", 1, 0),
               ("renew_all", 1), ("sleep", 0.1), ("read", 1, "r0")]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(NO_PEERS, 1, 0.0, None)
@example(OLD_COPY, 1, 0.0, None)
@example(AMNESIAC_WRITE, 1, 0.0, None)
@example(UNMARKED_COPY, 1, 0.0, None)
@example(LOST_VOLUME, 1, 0.0, 2)
@given(st.lists(STEP, min_size=5, max_size=60), st.integers(0, 2**32), st.sampled_from([0, 0.1]),
       st.one_of(st.none(), st.integers(0, SHARDS - 1)))
def test_no_serving_shard_holds_a_version_older_than_an_acknowledged_write(
        steps: list[tuple[Any, ...]], seed: int, loss: float, absent: int | None) -> None:
    run_virtual(lambda: _run(steps, seed, loss, absent))


def test_the_model_reaches_the_interesting_cases() -> None:
    """A fixed program: a one-sided cut while writes go on, a restart on an older copy, and the
    renewals of the other gateway in between; the checks above are not vacuous."""
    steps: list[tuple[Any, ...]] = [("renew", g, s) for g in range(2) for s in range(3)]
    steps += [("sleep", 0.05), ("write", 0, "r0"), ("sleep", 0.05), ("cut", 0, 1)]
    for _ in range(4):
        steps += [("write", 0, "r0"), ("renew", 1, 1), ("renew", 1, 0), ("renew", 1, 2),
                  ("sleep", 0.05), ("read", 1, "r0")]
    steps += [("sleep", 0.3), ("restart", 1, 1), ("renew", 1, 1), ("sleep", 0.05),
              ("read", 1, "r0"), ("heal", 0, 1)]
    steps += [("renew", g, s) for g in range(2) for s in range(3)] + [("sleep", 0.1)]
    tally = run_virtual(lambda: _run(steps, 7, 0.0))
    assert tally["acked"] == 5 and tally["failed"] == 0
    assert tally["served"] >= 3 and tally["reads"] > tally["served"]


def test_a_mesh_started_with_a_shard_absent_serves_from_the_quorum_it_has() -> None:
    """Shard 2 is down from the start: the other two are founded together, serve, and take
    writes (each waiting shard 2's lease out); shard 2, once up, joins by the first-grant rule
    and serves what was written while it was away."""
    steps: list[tuple[Any, ...]] = [("read", 1, "r0")]
    renewed = [("renew_all", 0), ("renew_all", 1), ("sleep", 0.1)]
    for _ in range(3):  # the model has no renewal loop: a lease lasts until the next round
        steps += [("write", 0, "r0"), ("write", 1, "r1"), ("sleep", 0.3), *renewed,
                  ("read", 1, "r0")]
    steps += [("up", 2), *renewed, ("cut", 1, 0), ("cut", 1, 1), ("read", 1, "r0"),
              ("read", 1, "r1")]
    tally = run_virtual(lambda: _run(steps, 7, 0.0, absent=2))
    assert tally["acked"] == 6 and tally["failed"] == 0
    # 4 reads on two shards, 2 on shard 2 alone, then both records through each gateway
    assert tally["reads"] == tally["served"] == 4 * 2 + 2 + 2 * (3 + 1)


def test_vouchers_meet_every_quorum() -> None:
    for n in range(2, 10):
        q = quorum(n)
        assert steady_vouchers(n) + q > n - 1  # a steady renewal meets a quorum without S
        assert first_vouchers(n) + (q - 1) > n - 1  # a first one, even if S lost W
        assert q + q > n  # two quorums meet: a founding quorum meets every write's


def test_a_write_waits_out_the_lease_only_when_a_shard_did_not_apply_it() -> None:
    tally = WriteTally(3, commit_wait_s(1.0))
    tally.ack(10.0)
    assert tally.done_at() is None
    tally.ack(10.5)
    assert tally.done_at() == pytest.approx(10.5 + commit_wait_s(1.0)) and tally.waited()
    tally.ack(10.6)
    assert tally.done_at() == 10.5 and not tally.waited()
    lost = WriteTally(3, 1.0)
    lost.fail()
    lost.fail()
    assert lost.lost()
    assert commit_wait_s(1.0) > 1.0


def test_cursors_are_kept_per_incarnation_of_the_shard() -> None:
    cursors = Cursors()
    cursors.advance("i1", "peer", "p1", 7)
    assert cursors.start("i1", "peer") == ("p1", 7) and cursors.start("i2", "peer") == ("", 0)
    cursors.forget("i1")
    assert cursors.start("i1", "peer") == ("", 0)


async def test_renew_counts_only_established_peers_once_the_shard_is(monkeypatch) -> None:  # noqa: ANN001
    """A steady renewal whose drained peers are all new (restarted) is not granted."""
    net = Net(random.Random(1), 0.0)
    shards = [FakeShard(i, 1.0) for i in range(3)]
    clients = [FakeClient(0, s, net) for s in shards]
    first = await renew(clients[0], clients[1:], Cursors(), DEADLINE_S)
    assert first.serving_s is not None and first.drained == 2 and first.established == 0
    steady = await renew(clients[0], clients[1:], Cursors(), DEADLINE_S)
    assert steady.serving_s is None  # established now: its peers must be too
    for i in (1, 2):
        await renew(clients[i], [c for c in clients if c is not clients[i]], Cursors(),
                    DEADLINE_S)
    assert (await renew(clients[0], clients[1:], Cursors(), DEADLINE_S)).serving_s is not None
