"""Durability: confirmed entries and versions survive SIGKILL; bad stores fail loudly at start."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import lmdb
import pytest

from services.common.values.reads import ReadSet, Served
from services.csl.client import CslClient
from services.csl.core import LibraryOptions, SubgraphLibrary
from services.csl.errors import StoreCorrupt, StoreForeign, StoreLocked, StoreMissing
from tests.csl.factories import FakeClock, library, name, reads, shadow

REPO = Path(__file__).resolve().parents[2]

WRITER = textwrap.dedent("""
    import sys, time
    from services.common.values.reads import ReadSet
    from services.csl.core import SubgraphLibrary
    from tests.csl.factories import name, reads, shadow
    lib = SubgraphLibrary(sys.argv[1])  # defaults: fsync on commit
    lib.put(name(1), b"kept", ReadSet.pure(), cost_s=3.0)
    lib.put(name(2), b"reads doc", reads(("doc", 0)))
    lib.put(name(3), b"chained", reads(producers=(name(1),)))
    lib.write_records("acme", ["doc"])
    lib.put_shadow(shadow(name(4)))
    print("ready", flush=True)
    time.sleep(60)
""")


def _run_and_kill(path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL


def test_confirmed_entries_and_versions_survive_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "csl"
    _run_and_kill(path)
    with SubgraphLibrary(path, LibraryOptions(create=False)) as lib:
        assert lib.lookup(name(1)) == Served(b"kept", 3.0)
        assert lib.lookup(name(3)) == Served(b"chained", 0.0)
        assert lib.lookup(name(2)) is None  # invalidated before the kill
        assert lib.record_version("acme", "doc") == 1
        assert lib.promote(name(4), "b1") is None  # shadows may be dropped on restart
        assert lib.stats().shadows == 0
        # the chain is still wired for invalidation after the restart
        lib.put(name(5), b"x", reads(("doc", 1), producers=(name(3),)))
        assert lib.write_records("acme", ["doc"]).invalidated == 1


def test_restart_continues_incarnation_ids_and_the_write_sequence(tmp_path: Path) -> None:
    path = tmp_path / "csl"
    with library(path) as lib:
        lib.put(name(1), b"a", ReadSet.pure())
        seq = lib.write_records("acme", ["doc"]).versions[0].version
    with library(path) as lib:
        lib.put(name(2), b"b", ReadSet.pure())
        assert lib.write_records("acme", ["x"]).versions[0].version == seq + 1
        assert sorted(lib._store.eids()) == [1, 2]


def test_entries_stale_on_disk_are_dropped_at_start(tmp_path: Path) -> None:
    path = tmp_path / "csl"
    with library(path) as lib:
        lib.put(name(1), b"a", reads(("doc", 0)))
        lib.put(name(2), b"b", reads(producers=(name(1),)))
        lib.put(name(3), b"c", reads(complete=False))
        # A crash after a version commit but before the deletes reached disk looks like this:
        lib._store.commit(versions=[(("acme", "doc"), 9)], seq=9)
    with library(path) as lib:
        assert [lib.lookup(name(i)) for i in (1, 2, 3)] == [None, None, None]
        assert lib._store.eids() == []


def test_shadows_do_not_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "csl"
    with library(path) as lib:
        lib.put_shadow(shadow(name(1)))
    with library(path) as lib:
        assert lib.stats().shadows == 0


def test_missing_directory_is_reported_when_creation_is_not_allowed(tmp_path: Path) -> None:
    path = tmp_path / "nope"
    with pytest.raises(StoreMissing, match=str(path)):
        SubgraphLibrary(path, LibraryOptions(create=False))
    assert not path.exists()


def test_empty_directory_is_reported_when_creation_is_not_allowed(tmp_path: Path) -> None:
    with pytest.raises(StoreMissing, match="data.mdb"):
        SubgraphLibrary(tmp_path, LibraryOptions(create=False))


def test_store_whose_data_file_vanished_is_not_recreated(tmp_path: Path) -> None:
    path = tmp_path / "csl"
    with library(path) as lib:
        lib.put(name(1), b"a", ReadSet.pure())
    (path / "data.mdb").unlink()
    with pytest.raises(StoreMissing, match="refusing to recreate"):
        library(path)
    assert not (path / "data.mdb").exists()


def test_garbage_data_file_is_reported_as_corrupt_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "csl"
    with library(path) as lib:
        lib.put(name(1), b"a", ReadSet.pure())
    data = path / "data.mdb"
    garbage = os.urandom(data.stat().st_size)
    data.write_bytes(garbage)
    with pytest.raises(StoreCorrupt, match=str(path)):
        library(path)
    assert data.read_bytes() == garbage


def test_directory_with_foreign_files_is_not_overwritten(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(StoreForeign, match="refusing"):
        library(tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_foreign_lmdb_environment_is_rejected(tmp_path: Path) -> None:
    env = lmdb.open(str(tmp_path), max_dbs=2)
    with env.begin(write=True) as txn:
        txn.put(b"hello", b"world")
    env.close()
    with pytest.raises(StoreForeign, match="sub-databases"):
        library(tmp_path)


def test_a_second_open_of_the_same_store_is_refused(tmp_path: Path) -> None:
    with library(tmp_path / "csl"), pytest.raises(StoreLocked, match="already open"):
        library(tmp_path / "csl")


def test_shrinking_the_budget_evicts_at_start(tmp_path: Path) -> None:
    path = tmp_path / "csl"
    with library(path, budget_bytes=1 << 20) as lib:
        for i in range(20):
            lib.put(name(i), b"x" * 1000, ReadSet.pure(), cost_s=1.0)
    with library(path, FakeClock(), budget_bytes=5000) as lib:
        assert lib.stats().bytes <= 5000 and lib.stats().entries > 0
        assert len(lib._store.eids()) == lib.stats().entries


async def _start_service(path: Path) -> tuple[subprocess.Popen[str], str]:
    argv = [sys.executable, "-m", "services.csl", "--data-dir", str(path), "--metrics-port", "-1",
            "--log-level", "WARNING"]
    proc = await asyncio.to_thread(subprocess.Popen, argv, cwd=REPO, stdout=subprocess.PIPE,
                                   text=True)
    assert proc.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)
    return proc, json.loads(line)["address"]


async def test_service_keeps_confirmed_entries_across_sigkill_and_restart(tmp_path: Path) -> None:
    path = tmp_path / "csl"
    proc, address = await _start_service(path)
    try:
        async with CslClient(address) as client:
            assert await client.put(name(1), b"durable", ReadSet.pure(), cost_s=2.0)
            version = (await client.write_records("acme", ["doc"])).versions[0].version
            assert await client.put(name(2), b"fresh", reads(("doc", version)))
            assert await client.put_shadow(shadow(name(3)))
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    proc, address = await _start_service(path)
    try:
        async with CslClient(address) as client:
            assert await client.lookup(name(1)) == Served(b"durable", 2.0)
            assert await client.lookup(name(2)) == Served(b"fresh", 0.0)
            assert await client.promote(name(3), "b1") is None
            assert (await client.write_records("acme", ["doc"])).invalidated == 1
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
