"""The csl's LMDB environment (``store.Store``): one writer per directory, entries, versions and
the write sequence committed together and read back at start."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common.values.reads import RecordRead
from services.csl import codec
from services.csl.errors import StoreLocked
from services.csl.store import Store, StoreOptions


def test_a_commit_is_read_back_whole_after_reopening(tmp_path: Path) -> None:
    store = Store(tmp_path, StoreOptions(sync=False))
    value, _ = codec.encode_entry(b"k", 1.5, 3, True, (RecordRead("doc", 2),), (), b"result")
    store.commit(puts=[(codec.eid_key(4), value)], versions=[(("", "doc"), 2)], seq=3)
    store.close()
    store.close()  # twice is fine
    again = Store(tmp_path, StoreOptions(sync=False))
    loaded = again.load()
    assert loaded.seq == 3 and loaded.versions == {("", "doc"): 2}
    assert [(e.eid, e.key, e.reads) for e in loaded.entries] == [(4, b"k",
                                                                   (RecordRead("doc", 2),))]
    again.commit(deletes=[codec.eid_key(4)])
    assert again.eids() == []
    again.close()


def test_a_second_writer_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    first = Store(tmp_path, StoreOptions(sync=False))
    try:
        with pytest.raises(StoreLocked):
            Store(tmp_path, StoreOptions(sync=False))
    finally:
        first.close()
