"""BM25 over the in-memory index: tokens, counts, the snapshot, scores, changed terms, top k."""

from __future__ import annotations

import math
from collections import Counter

from services.corpus.bm25 import (
    MAX_TERM_CHARS,
    CorpusStats,
    InvertedIndex,
    changed_terms,
    term_counts,
    tokenize,
    top_k,
)


def test_tokens_are_case_folded_without_stop_words_or_overlong_ones() -> None:
    assert tokenize("The Drummer of RUSH, and the drummer!") == ["drummer", "rush", "drummer"]
    assert tokenize("x" * (MAX_TERM_CHARS + 1)) == []
    assert term_counts("Rush", "Rush drummer") == Counter({"rush": 2, "drummer": 1})


def test_snapshot_idf_is_lucene_s_and_round_trips() -> None:
    stats = CorpusStats(10, 4.5, {"rare": 1, "common": 10})
    assert stats.idf("rare") == math.log(1 + (10 - 1 + 0.5) / 1.5)
    assert stats.idf("common") > 0 and stats.idf("absent") > stats.idf("rare")
    assert CorpusStats.from_json(stats.to_json()) == stats


def test_index_scores_against_a_frozen_snapshot() -> None:
    index = InvertedIndex()
    index.put("a", term_counts("", "drummer drummer band"))
    index.put("b", term_counts("", "drummer"))
    index.put("c", term_counts("", "guitar"))
    stats = index.stats()
    assert (stats.n, stats.avgdl, dict(stats.df)) == (3, 5 / 3, {"band": 1, "drummer": 2,
                                                                 "guitar": 1})
    scores = index.score(["drummer"], stats)
    assert set(scores) == {"a", "b"} and scores["a"] != scores["b"]
    index.put("c", term_counts("", "drummer guitar"))  # re-indexed; the snapshot stays put
    assert set(index.score(["drummer"], stats)) == {"a", "b", "c"}
    assert index.score(["drummer"], stats)["a"] == scores["a"]  # a's own terms did not move
    assert index.stats() != stats
    index.remove("a")
    index.remove("absent")
    assert "a" not in index and len(index) == 2 and index.terms_of("a") == Counter()


def test_changed_terms_are_all_on_a_length_change_else_the_moved_ones() -> None:
    old = Counter({"a": 1, "b": 1})
    assert changed_terms(old, Counter({"a": 1, "b": 1})) == set()
    assert changed_terms(old, Counter({"a": 2})) == {"a", "b"}  # same length, both moved
    assert changed_terms(old, Counter({"a": 1, "b": 1, "c": 1})) == {"a", "b", "c"}
    assert changed_terms(None, Counter({"a": 1})) == {"a"}
    assert changed_terms(old, None) == {"a", "b"}


def test_top_k_orders_by_score_then_id() -> None:
    assert top_k({"b": 1.0, "a": 1.0, "c": 2.0}, 2) == [("c", 2.0), ("a", 1.0)]
    assert top_k({}, 3) == []
