"""The change feed (``change_feed.ChangeFeed``): records in the order they last changed, so a
reader that drains it from a cursor sees every change after it, whatever the versions — an
adopted version below every version handed out before included."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.csl.change_feed import ChangeFeed
from services.csl.versions import VersionTable


def _drain(feed: ChangeFeed, after: int, limit: int) -> tuple[list, int]:
    keys, more = [], True
    while more:
        page, after, more = feed.since(after, limit)
        keys += page
    return keys, after


def test_a_record_changed_again_moves_to_the_end_and_is_listed_once() -> None:
    feed = ChangeFeed([("", "a"), ("", "b")])
    feed.touch([("", "a")])
    assert feed.since(0, 10) == ([("", "b"), ("", "a")], 3, False)
    assert feed.since(2, 10) == ([("", "a")], 3, False)
    assert feed.since(3, 10) == ([], 3, False)


def test_pages_resume_where_the_last_one_ended() -> None:
    feed = ChangeFeed([("", str(i)) for i in range(5)])
    page, cursor, more = feed.since(0, 2)
    assert page == [("", "0"), ("", "1")] and cursor == 2 and more
    assert _drain(feed, cursor, 2) == ([("", str(i)) for i in range(2, 5)], 5)


def test_an_adopted_version_below_the_cursor_is_still_listed() -> None:
    """Why the feed exists: a version number does not say when a record changed here."""
    table = VersionTable()
    table.bump("", ["a", "b", "c"])  # versions 1..3
    _, cursor, _ = table.changed_since(0, 100)
    assert table.adopt(("", "d"), 2)  # another shard's version of a write this one missed
    assert table.since(3, 100) == []  # by version: lost
    assert table.changed_since(cursor, 100)[0] == [(("", "d"), 2)]  # by change: found


def test_the_log_is_compacted_and_stays_exact() -> None:
    feed = ChangeFeed()
    for _ in range(200):
        feed.touch([("", "hot")])
    assert len(feed._log) < 200  # compacted
    assert feed.since(0, 10) == ([("", "hot")], 200, False)


@given(st.lists(st.lists(st.integers(0, 9), max_size=4), max_size=40), st.integers(1, 5),
       st.data())
def test_draining_from_any_cursor_lists_exactly_the_records_changed_after_it(
        batches: list[list[int]], limit: int, data: st.DataObject) -> None:
    feed = ChangeFeed()
    history: list[tuple[int, tuple[str, str]]] = []
    for batch in batches:
        for i in batch:
            feed.touch([("", str(i))])
            history.append((feed.last, ("", str(i))))
    cursor = data.draw(st.integers(0, feed.last))
    keys, end = _drain(feed, cursor, limit)
    latest = {key: stamp for stamp, key in history}
    assert sorted(keys) == sorted(k for k, stamp in latest.items() if stamp > cursor)
    assert len(keys) == len(set(keys)) and end == feed.last
