"""RecordTable: the corpus's record ids, the version of each, and what a csl that lost writes
does not know."""

from __future__ import annotations

import pytest

from services.common.values.errors import FailedPrecondition, InvalidArgument
from services.corpus import RecordVersion
from services.corpus.records import RecordTable


def _table() -> RecordTable:
    table = RecordTable("wiki")
    table.docs, table.terms, table.stats, table.seq = {"a": 3, "b": 0}, {"x": 5}, 7, 7
    return table


def test_record_ids_and_their_versions() -> None:
    table = _table()
    assert (table.doc_record("a"), table.term_record("x"), table.stats_record()) == (
        "corpus/wiki/doc/a", "corpus/wiki/term/x", "corpus/wiki/stats")
    assert [table.current(r) for r in ("corpus/wiki/doc/a", "corpus/wiki/term/x",
                                       "corpus/wiki/stats", "corpus/wiki/doc/new",
                                       "corpus/wiki/term/new")] == [3, 5, 7, 0, 0]
    assert table.split("corpus/wiki/doc/a/b") == ("doc", "a/b")  # ids may hold a slash


@pytest.mark.parametrize("record_id", ["corpus/news/doc/a", "corpus/wiki/page/a", "doc/a"])
def test_another_corpus_s_record_is_refused(record_id: str) -> None:
    with pytest.raises(InvalidArgument, match="not a record of corpus 'wiki'"):
        _table().split(record_id)


def test_versions_must_move_up() -> None:
    table = _table()
    table.check_above({"corpus/wiki/doc/a": 4, "corpus/wiki/doc/new": 1})
    for stale in ({"corpus/wiki/doc/a": 3}, {"corpus/wiki/stats": 2}, {"corpus/wiki/doc/b": 0},
                  {"corpus/wiki/doc/a": 2**64}):
        with pytest.raises(FailedPrecondition, match="not above"):
            table.check_above(stale)


def test_records_above_a_sequence_sorted_by_id() -> None:
    table = _table()
    assert table.above(4) == (RecordVersion("corpus/wiki/stats", 7),
                              RecordVersion("corpus/wiki/term/x", 5))
    assert table.above(0) == (RecordVersion("corpus/wiki/doc/a", 3),
                              RecordVersion("corpus/wiki/stats", 7),
                              RecordVersion("corpus/wiki/term/x", 5))
    assert table.above(7) == ()
