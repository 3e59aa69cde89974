"""Record versions (``versions.VersionTable``, DESIGN.md §5.3): each write gets the next
version, above the writer's floor; a tenant sees its own and the shared records; freshness and
incomplete provenance are judged against them; catch-up adopts only newer versions."""

from __future__ import annotations

from services.common.values.reads import RecordRead
from services.csl.versions import VersionTable


def test_writes_get_increasing_versions_above_their_floors() -> None:
    table = VersionTable()
    assert table.bump("", ["a", "b"]) == [(("", "a"), 1), (("", "b"), 2)]
    assert table.bump("t", ["a"], floors=[10]) == [(("t", "a"), 11)]
    assert table.seq == 11 and len(table) == 3


def test_a_tenant_sees_its_own_and_the_shared_version() -> None:
    table = VersionTable({("", "doc"): 3, ("t", "doc"): 5}, seq=5)
    assert table.effective("t", "doc") == 5 and table.effective("u", "doc") == 3
    assert table.effective("", "doc") == 3
    assert table.is_fresh("u", [RecordRead("doc", 3)])
    assert not table.is_fresh("t", [RecordRead("doc", 3)])


def test_incomplete_provenance_is_valid_only_while_nothing_was_written_since() -> None:
    table = VersionTable()
    table.bump("", ["x"])
    assert table.is_valid("t", [], complete=False, stored_seq=1)
    table.bump("t", ["y"])
    assert not table.is_valid("t", [], complete=False, stored_seq=1)
    assert table.is_valid("u", [], complete=False, stored_seq=1)  # another tenant's write
    assert table.is_valid("t", [], complete=True, stored_seq=1)


def test_catch_up_adopts_only_newer_versions_and_pages_never_split_a_version() -> None:
    table = VersionTable()
    table.bump("", ["a", "b", "c"])
    assert not table.adopt(("", "a"), 1) and table.adopt(("", "a"), 9)
    assert table.seq == 9
    assert table.adopt(("", "d"), 9)  # another shard's version of the same write
    page = table.since(2, limit=2)
    assert [v for _, v in page] == [3, 9, 9]  # the page runs on to the end of version 9
