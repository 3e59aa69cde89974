"""The library's LMDB environment: opening it safely, loading it, and committing changes.

Layout: one environment directory with three named sub-databases, ``meta`` (schema marker and
the global write sequence), ``versions`` (record key -> u64) and ``entries`` (name key -> entry
value, see ``codec.py``). Only confirmed entries and versions are stored; shadows live in memory.

Start-up never recreates a store over data: a missing directory with ``create=False``, a
non-empty directory without ``data.mdb``, a file LMDB rejects, a readable environment without
our schema marker, or a record that does not decode each raise a ``StoreError`` naming the path.
An exclusive ``flock`` on the directory, taken before LMDB opens anything, keeps a second
process (or a second library in this one: LMDB forbids opening an environment twice per process)
away; the kernel drops it when the holder dies, SIGKILL included.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import lmdb

from services.common.values.errors import ResourceExhausted
from services.common.values.reads import RecordKey
from services.csl import codec
from services.csl.errors import StoreCorrupt, StoreForeign, StoreLocked, StoreMissing

log = logging.getLogger(__name__)

SCHEMA = b"dynbranch.csl/1"
_SCHEMA_KEY = b"schema"
_SEQ_KEY = b"seq"
_DATA_FILE = "data.mdb"
_LOCK_FILE = "lock.mdb"


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """How to open the environment."""

    create: bool = True
    map_size: int = 1 << 30
    #: fsync on every commit. Without it a SIGKILL loses nothing (pages are in the OS cache) but
    #: a machine crash may lose the last commits; LMDB stays consistent either way.
    sync: bool = True


@dataclass(frozen=True, slots=True)
class Loaded:
    """Everything read from disk at start-up."""

    versions: dict[RecordKey, int]
    seq: int
    entries: list[codec.StoredEntry]


class Store:
    """An open csl LMDB environment."""

    def __init__(self, path: str | os.PathLike[str],
                 options: StoreOptions = StoreOptions()) -> None:
        self.path = Path(path)
        _ensure_directory(self.path, options.create)
        self._lock_fd: int | None = _lock(self.path)
        try:
            fresh = _is_fresh(self.path, options.create)
            self.env = _open_env(self.path, options)
        except BaseException:
            self._unlock()
            raise
        try:
            self.entries_db, self.versions_db, self._meta_db = self._open_dbs(fresh)
        except BaseException:
            self.close()
            raise

    def _open_dbs(self, fresh: bool) -> tuple[object, object, object]:
        try:
            if fresh:
                return self._create_dbs()
            # Handles opened inside a read transaction die with it, so let py-lmdb open them.
            meta = self.env.open_db(b"meta", create=False)
            with self.env.begin(db=meta) as txn:
                schema = txn.get(_SCHEMA_KEY)
            if schema != SCHEMA:
                raise StoreForeign(self.path, f"schema {schema!r}, expected {SCHEMA!r}")
            entries = self.env.open_db(b"entries", create=False)
            versions = self.env.open_db(b"versions", create=False)
            return entries, versions, meta
        except lmdb.NotFoundError as exc:
            raise StoreForeign(self.path, "LMDB environment without csl sub-databases") from exc
        except lmdb.Error as exc:
            raise StoreCorrupt(self.path, f"cannot read LMDB metadata: {exc}") from exc

    def _create_dbs(self) -> tuple[object, object, object]:
        with self.env.begin(write=True) as txn:
            meta = self.env.open_db(b"meta", txn=txn)
            entries = self.env.open_db(b"entries", txn=txn)
            versions = self.env.open_db(b"versions", txn=txn)
            txn.put(_SCHEMA_KEY, SCHEMA, db=meta)
            txn.put(_SEQ_KEY, codec.encode_u64(0), db=meta)
        log.info("created csl store", extra={"path": str(self.path)})
        return entries, versions, meta

    def load(self) -> Loaded:
        """Read every version and entry; raise ``StoreCorrupt`` on anything undecodable."""
        try:
            with self.env.begin(buffers=False) as txn:
                seq = codec.decode_u64(txn.get(_SEQ_KEY, b"", db=self._meta_db))
                versions = {codec.decode_record_key(k): codec.decode_u64(v)
                            for k, v in txn.cursor(db=self.versions_db)}
                entries = [codec.decode_entry(k, v) for k, v in txn.cursor(db=self.entries_db)]
        except (lmdb.Error, ValueError, struct.error, UnicodeDecodeError) as exc:
            raise StoreCorrupt(self.path, f"undecodable record: {exc}") from exc
        return Loaded(versions, seq, entries)

    def commit(
        self,
        puts: Iterable[tuple[bytes, bytes]] = (),
        deletes: Iterable[bytes] = (),
        versions: Iterable[tuple[RecordKey, int]] = (),
        seq: int | None = None,
    ) -> None:
        """Apply entry puts and deletes (LMDB keys, ``codec.eid_key``; pass deletes sorted: LMDB
        deletes in key order run about twice as fast) and version bumps in one transaction."""
        try:
            with self.env.begin(write=True, db=self.entries_db) as txn:
                _apply(txn, self.versions_db, puts, deletes, versions)
                if seq is not None:
                    txn.put(_SEQ_KEY, codec.encode_u64(seq), db=self._meta_db)
        except lmdb.MapFullError as exc:
            raise ResourceExhausted(f"csl store {str(self.path)!r} is full (map_size)") from exc

    def eids(self) -> list[int]:
        """Incarnation ids of every stored entry (tests and audits)."""
        with self.env.begin() as txn:
            keys = txn.cursor(db=self.entries_db).iternext(values=False)
            return [codec.decode_u64(k) for k in keys]

    def close(self) -> None:
        """Close the environment and drop the lock; safe to call twice."""
        if self._lock_fd is not None:
            self.env.close()
            self._unlock()

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def _apply(txn, versions_db, puts, deletes, versions) -> None:  # type: ignore[no-untyped-def]
    delete = txn.delete  # the transaction's default db is ``entries``: no keyword parsing per key
    for key in deletes:
        delete(key)
    for key, value in puts:
        txn.put(key, value)
    for rkey, version in versions:
        txn.put(codec.encode_record_key(rkey), codec.encode_u64(version), db=versions_db)


def _ensure_directory(path: Path, create: bool) -> None:
    if not path.exists():
        if not create:
            raise StoreMissing(path, "does not exist and create=False")
        path.mkdir(parents=True, exist_ok=True)
    if not path.is_dir():
        raise StoreForeign(path, "is not a directory")


def _is_fresh(path: Path, create: bool) -> bool:
    """Return True when a new store must be created at ``path``; raise when that is unsafe."""
    data, names = path / _DATA_FILE, {p.name for p in path.iterdir()}
    if data.exists() and data.stat().st_size > 0:
        return False
    if not data.exists() and _LOCK_FILE in names:
        raise StoreMissing(path, f"has {_LOCK_FILE} but no {_DATA_FILE}: the store's data file "
                                 "is gone; refusing to recreate it")
    # Empty, or a creation that never committed (a zero-byte data file): nothing to lose.
    others = names - {_DATA_FILE, _LOCK_FILE}
    if others:
        raise StoreForeign(path, f"holds {sorted(others)[:3]} but no {_DATA_FILE}; "
                                 "refusing to create a store over it")
    if not create:
        raise StoreMissing(path, f"has no {_DATA_FILE} and create=False")
    return True


def _open_env(path: Path, options: StoreOptions) -> lmdb.Environment:
    try:
        return lmdb.open(str(path), map_size=options.map_size, max_dbs=4, sync=options.sync,
                         create=False, readahead=False, max_spare_txns=4)
    except lmdb.Error as exc:
        raise StoreCorrupt(path, f"LMDB refused to open it: {exc}") from exc


def _lock(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        os.close(fd)
        raise StoreLocked(path, "already open in another process or library") from exc
    return fd


__all__ = ["SCHEMA", "Loaded", "Store", "StoreOptions"]
