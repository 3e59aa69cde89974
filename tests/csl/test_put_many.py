"""Stores committed together (``put_many``, the PutStream's batches): each judged as ``put``
would judge it alone, one transaction for the batch, nothing orphaned on disk."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from services.common.values.errors import InvalidArgument, ResourceExhausted
from services.common.values.reads import ReadSet
from services.csl.client import CslClient, PutPipe
from services.csl.config import CslSettings
from services.csl.core import SubgraphLibrary
from services.csl.server import build_runtime
from services.csl.store import Store
from tests.csl.factories import library, name, reads


def _commits(lib: SubgraphLibrary, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    commit = lib._store.commit

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        return commit(*args, **kwargs)
    monkeypatch.setattr(lib._store, "commit", counted)
    return calls


def test_a_batch_is_judged_item_by_item_in_one_transaction(
        lib: SubgraphLibrary, monkeypatch: pytest.MonkeyPatch) -> None:
    lib.write_records("acme", ["doc"])  # doc is at version 1: a read of version 0 is stale
    commits = _commits(lib, monkeypatch)
    out = lib.put_many([
        (name(1), b"one", ReadSet.pure(), 1.0),
        (name(2), b"stale", reads(("doc", 0)), 1.0),
        (name(3), b"bad", ReadSet.pure(), -1.0),
        (name(4), b"four", reads(producers=(name(1),)), 1.0),  # its producer: this batch's
        (name(5), b"orphan", reads(producers=(name(99),)), 1.0),
        (name(1), b"one", ReadSet.pure(), 1.0),  # again: idempotent
    ])
    assert out[0] is True and out[1] is False and out[4] is False and out[5] is True
    assert isinstance(out[2], InvalidArgument) and out[3] is True
    assert len(commits) == 1
    assert lib.lookup(name(1)).result == b"one" and lib.lookup(name(4)).result == b"four"
    assert lib.lookup(name(2)) is None and lib.lookup(name(3)) is None
    # freshness across the batch: a write to a record one entry read invalidates it
    lib.put_many([(name(6), b"six", reads(("doc", 1)), 0.0)])
    lib.write_records("acme", ["doc"])
    assert lib.lookup(name(6)) is None


def test_an_entry_evicted_by_a_later_one_of_its_batch_is_not_left_on_disk(
        tmp_path: Path) -> None:
    with library(tmp_path / "csl", budget_bytes=4096) as lib:
        out = lib.put_many([(name(i), bytes([i]) * 900, ReadSet.pure(), float(i))
                            for i in range(12)])
        assert all(o is True for o in out)
        live = sorted(m.eid for m in lib._confirmed.entries.values())
        assert sorted(lib._store.eids()) == live  # disk holds exactly the live entries
        assert lib.stats().bytes <= 4096
    with library(tmp_path / "csl", budget_bytes=4096) as reopened:  # reloads the same
        assert sorted(m.eid for m in reopened._confirmed.entries.values()) == live


def test_a_failed_commit_refuses_the_whole_batch_and_forgets_it(
        lib: SubgraphLibrary, monkeypatch: pytest.MonkeyPatch) -> None:
    assert lib.put(name(0), b"kept", ReadSet.pure())
    commit = lib._store.commit

    def full(puts=(), deletes=(), **kwargs):  # noqa: ANN001, ANN003, ANN202
        if list(puts):
            raise ResourceExhausted("csl store is full (map_size)")
        return commit(puts=puts, deletes=deletes, **kwargs)
    monkeypatch.setattr(lib._store, "commit", full)
    out = lib.put_many([(name(1), b"a", ReadSet.pure(), 0.0),
                        (name(2), b"b", reads(producers=(name(1),)), 0.0),
                        (name(0), b"kept", ReadSet.pure(), 0.0)])
    assert isinstance(out[0], ResourceExhausted) and isinstance(out[1], ResourceExhausted)
    assert out[2] is True  # stored before this batch
    assert lib.lookup(name(1)) is None and lib.lookup(name(2)) is None
    assert lib.stats().entries == 1 and lib.lookup(name(0)).result == b"kept"


async def test_stores_in_flight_on_one_stream_share_transactions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    commits: list[int] = []
    commit = Store.commit

    def counted(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        commits.append(1)
        return commit(self, *args, **kwargs)
    monkeypatch.setattr(Store, "commit", counted)
    runtime = await build_runtime(CslSettings(data_dir=str(tmp_path / "csl"), metrics_port=-1,
                                              grace_s=0.2, sync=False))
    await runtime.start()
    try:
        async with CslClient(runtime.address) as client:
            pipe = PutPipe(client)
            requests = [client.put_request(name(i), f"r{i}".encode(), ReadSet.pure())
                        for i in range(200)]
            bad = client.put_request(name(500), b"x", ReadSet.pure())
            bad.name.digest = "not-hex"
            acks = await asyncio.gather(*(pipe.put(r) for r in [*requests[:100], bad,
                                                                 *requests[100:]]))
            assert acks[100] is False and all(acks[:100]) and all(acks[101:])
            assert len(commits) < 200  # batched, not one transaction per store
            for i in (0, 99, 199):
                assert (await client.lookup(name(i))).result == f"r{i}".encode()
            await pipe.close()
    finally:
        await runtime.shutdown()
