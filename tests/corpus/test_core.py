"""The corpus core: BM25 over a versioned LMDB corpus, exact read-sets, writes, versions,
persistence, the folder lock and a store that moved under the index."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.values.errors import FailedPrecondition, InvalidArgument, NotFound
from services.corpus import Corpus, Document, RecordVersion
from services.corpus.codec import encode_doc

DOCS = [
    Document("rush", "Rush", "Rush is a Canadian rock band. Its drummer was Neil Peart."),
    Document("peart", "Neil Peart", "Neil Peart was the drummer and lyricist of Rush."),
    Document("bonham", "John Bonham", "John Bonham was the drummer of Led Zeppelin."),
    Document("paris", "Paris", "Paris is the capital of France."),
    Document("oslo", "Oslo", "Oslo is the capital of Norway."),
]


@pytest.fixture
def corpus(tmp_path: Path) -> Iterator[Corpus]:
    with Corpus(tmp_path / "corpus", "wiki", sync=False, refresh_fraction=10.0) as c:
        c.load_documents(DOCS)
        yield c


def versions(reads: tuple[RecordVersion, ...]) -> dict[str, int]:
    return {r.record_id: r.version for r in reads}


# --- search ----------------------------------------------------------------------------------

def test_search_ranks_documents_that_match_the_query_first(corpus: Corpus) -> None:
    result = corpus.search("Rush drummer", k=3)
    assert [h.doc_id for h in result.hits] == ["rush", "peart", "bonham"]
    assert all(h.version == 0 for h in result.hits)


def test_search_returns_only_documents_with_a_query_term(corpus: Corpus) -> None:
    assert [h.doc_id for h in corpus.search("Norway", k=5).hits] == ["oslo"]
    assert corpus.search("the of and", k=5).hits == ()  # stop words only: nothing is read


def test_equal_scores_are_ordered_by_document_id(corpus: Corpus) -> None:
    assert [h.doc_id for h in corpus.search("capital", k=2).hits] == ["oslo", "paris"]


def test_read_set_is_query_terms_stats_and_returned_documents(corpus: Corpus) -> None:
    result = corpus.search("Capital of France", k=1)
    assert versions(result.reads) == {
        "corpus/wiki/term/capital": 0, "corpus/wiki/term/france": 0,
        "corpus/wiki/stats": 0, "corpus/wiki/doc/paris": 0}


# --- writes and freshness --------------------------------------------------------------------

def test_write_bumps_the_document_and_returns_every_bumped_record(corpus: Corpus) -> None:
    written = corpus.write_documents([Document("paris", "Paris", "Paris is in France.")])
    bumped = versions(written)
    assert bumped["corpus/wiki/doc/paris"] > 0
    assert {"corpus/wiki/term/france", "corpus/wiki/term/capital"} <= set(bumped)
    assert "corpus/wiki/term/norway" not in bumped
    assert corpus.get("paris") == (Document("paris", "Paris", "Paris is in France."),
                                   bumped["corpus/wiki/doc/paris"])


def test_write_to_an_unrelated_document_keeps_a_search_fresh(corpus: Corpus) -> None:
    before = corpus.search("drummer Rush", k=2)
    corpus.write_documents([Document("oslo", "Oslo", "Oslo is the largest city of Norway.")])
    after = corpus.search("drummer Rush", k=2)
    assert after == before


def test_write_that_could_change_the_ranking_changes_a_read_version(corpus: Corpus) -> None:
    before = corpus.search("drummer", k=1)
    corpus.write_documents([Document("oslo", "Oslo", "Oslo drummer drummer drummer.")])
    after = corpus.search("drummer", k=1)
    assert after.hits[0].doc_id == "oslo" and before.hits[0].doc_id != "oslo"
    changed = {r for r, v in versions(before.reads).items() if versions(after.reads).get(r) != v}
    assert "corpus/wiki/term/drummer" in changed


def test_removal_bumps_versions_and_readding_keeps_them_monotone(corpus: Corpus) -> None:
    removed = versions(corpus.write_documents(removals=["paris"]))
    assert corpus.get("paris") is None and "corpus/wiki/term/france" in removed
    readded = versions(corpus.write_documents([DOCS[3]]))
    assert readded["corpus/wiki/doc/paris"] > removed["corpus/wiki/doc/paris"]
    with pytest.raises(NotFound):
        corpus.write_documents(removals=["nowhere"])


def test_invalid_writes_are_refused(corpus: Corpus) -> None:
    with pytest.raises(InvalidArgument, match="twice"):
        corpus.write_documents([DOCS[0]], removals=["rush"])
    with pytest.raises(InvalidArgument):
        corpus.write_documents([])
    with pytest.raises(InvalidArgument, match="doc_id"):
        corpus.write_documents([Document("", "t", "x")])


def test_versions_from_the_library_are_adopted(corpus: Corpus) -> None:
    update = [Document("paris", "Paris", "Paris is the capital and largest city of France.")]
    planned = corpus.plan_write(update)
    assigned = {r: 1000 + i for i, r in enumerate(planned)}  # as WriteRecords would return
    written = corpus.write_documents(update, versions=assigned)
    assert versions(written) == assigned
    assert versions(corpus.search("France", k=1).reads)["corpus/wiki/doc/paris"] == \
        assigned["corpus/wiki/doc/paris"]
    standalone = versions(corpus.write_documents([DOCS[3]]))
    assert min(standalone.values()) > max(assigned.values())  # the sequence moved past them


def test_library_versions_must_match_the_plan_and_increase(corpus: Corpus) -> None:
    update = [Document("paris", "Paris", "Paris, France.")]
    planned = corpus.plan_write(update)
    with pytest.raises(FailedPrecondition, match="exactly"):
        corpus.write_documents(update, versions={planned[0]: 5})
    corpus.write_documents(update, versions={r: 50 for r in planned})
    again = [Document("paris", "Paris", "Paris, capital of France.")]
    with pytest.raises(FailedPrecondition, match="not above"):
        corpus.write_documents(again, versions={r: 50 for r in corpus.plan_write(again)})


def test_statistics_refresh_after_enough_writes(tmp_path: Path) -> None:
    with Corpus(tmp_path / "c", "wiki", sync=False, refresh_fraction=0.3) as corpus:
        corpus.load_documents(DOCS)
        first = versions(corpus.write_documents([DOCS[0]]))
        assert "corpus/wiki/stats" not in first
        second = versions(corpus.write_documents([DOCS[1]]))
        assert second["corpus/wiki/stats"] > 0
        assert versions(corpus.search("capital", k=1).reads)["corpus/wiki/stats"] == \
            second["corpus/wiki/stats"]
        assert corpus.refresh_stats().version > second["corpus/wiki/stats"]


def test_first_write_to_an_empty_corpus_takes_statistics(tmp_path: Path) -> None:
    with Corpus(tmp_path / "c", "wiki", sync=False) as corpus:
        corpus.write_documents(DOCS[:2])
        assert [h.doc_id for h in corpus.search("drummer", k=5).hits] == ["peart", "rush"]


# --- exactness property ----------------------------------------------------------------------

WORDS = ["alpha", "beta", "gamma", "delta", "omega"]
doc_texts = st.lists(st.sampled_from(WORDS), min_size=0, max_size=6).map(" ".join)
writes = st.lists(st.tuples(st.sampled_from("abcdef"), st.one_of(st.none(), doc_texts)),
                  min_size=1, max_size=12)
QUERIES = ["alpha", "beta gamma", "omega delta alpha"]


@settings(max_examples=40, deadline=None)
@given(initial=st.lists(doc_texts, min_size=1, max_size=6), ops=writes)
def test_search_with_unchanged_read_versions_returns_the_same_result(
        initial: list[str], ops: list[tuple[str, str | None]]) -> None:
    """Exact read-sets: if no record a search read changed version, its result did not change."""
    with tempfile.TemporaryDirectory() as folder, \
            Corpus(folder, "p", sync=False, refresh_fraction=0.5) as corpus:
        corpus.load_documents(Document(i, "", t) for i, t in zip("abcdef", initial, strict=False))
        for doc_id, text in ops:
            before = {q: corpus.search(q, k=2) for q in QUERIES}
            if text is not None:
                corpus.write_documents([Document(doc_id, "", text)])
            elif corpus.get(doc_id) is not None:
                corpus.write_documents(removals=[doc_id])
            for query, old in before.items():
                if all(corpus.version_of(r.record_id) == r.version for r in old.reads):
                    assert corpus.search(query, k=2) == old


# --- persistence -----------------------------------------------------------------------------

def test_reopening_restores_documents_versions_and_statistics(tmp_path: Path) -> None:
    with Corpus(tmp_path / "c", "wiki", sync=False) as corpus:
        corpus.load_documents(DOCS)
        corpus.write_documents([Document("oslo", "Oslo", "Oslo drummer.")])
        before, identity = corpus.search("drummer Oslo", k=3), corpus.identity
    with Corpus(tmp_path / "c", "wiki", create=False) as reopened:
        assert reopened.search("drummer Oslo", k=3) == before and reopened.identity == identity


def test_a_rebuilt_corpus_has_a_new_identity(tmp_path: Path) -> None:
    with Corpus(tmp_path / "a", "wiki", sync=False) as a, \
            Corpus(tmp_path / "b", "wiki", sync=False) as b:
        assert a.identity != b.identity and a.identity.startswith("wiki@")


def test_opening_another_corpus_s_folder_is_refused(tmp_path: Path) -> None:
    Corpus(tmp_path / "c", "wiki", sync=False).close()
    with pytest.raises(FailedPrecondition, match="wiki"):
        Corpus(tmp_path / "c", "news", sync=False)
    with pytest.raises(NotFound):
        Corpus(tmp_path / "absent", "wiki", create=False)


def test_bulk_load_needs_an_empty_corpus_and_unique_ids(corpus: Corpus, tmp_path: Path) -> None:
    with pytest.raises(FailedPrecondition, match="not empty"):
        corpus.load_documents(DOCS)
    with Corpus(tmp_path / "d", "wiki", sync=False) as fresh, \
            pytest.raises(InvalidArgument, match="duplicate"):
        fresh.load_documents([DOCS[0], DOCS[0]])


# --- reconciling with a library that lost writes ----------------------------------------------

def test_records_above_a_sequence_and_version_only_adoption(corpus: Corpus) -> None:
    assert corpus.records_above(0) == ()
    written = versions(corpus.write_documents([Document("paris", "Paris", "Paris, France.")]))
    above = {r.record_id: r.version for r in corpus.records_above(0)}
    assert above == written
    before = corpus.search("Paris France", k=1)
    moved = {r: v + 100 for r, v in above.items()}
    corpus.adopt_versions(moved)
    after = corpus.search("Paris France", k=1)
    assert after.hits[0].text == before.hits[0].text  # no text changed
    assert {r.record_id: r.version for r in after.reads} == {
        r.record_id: moved.get(r.record_id, r.version) for r in before.reads}
    with pytest.raises(FailedPrecondition, match="not above"):
        corpus.adopt_versions(moved)
    with pytest.raises(InvalidArgument, match="not a record"):
        corpus.adopt_versions({"corpus/other/doc/x": 10**6})


def test_adopted_versions_survive_a_reopen(tmp_path: Path) -> None:
    with Corpus(tmp_path / "c", "wiki", sync=False) as corpus:
        corpus.load_documents(DOCS)
        corpus.write_documents([Document("oslo", "Oslo", "Oslo drummer.")])
        corpus.adopt_versions({r.record_id: r.version + 50 for r in corpus.records_above(0)})
        before = corpus.search("drummer Oslo", k=3)
    with Corpus(tmp_path / "c", "wiki", create=False) as reopened:
        assert reopened.search("drummer Oslo", k=3) == before


# --- one opener, and a store that moved under the index ---------------------------------------

def test_a_second_opener_of_the_folder_is_refused_until_the_first_closes(tmp_path: Path) -> None:
    first = Corpus(tmp_path / "c", "wiki", sync=False)
    with pytest.raises(FailedPrecondition, match="open in another process"):
        Corpus(tmp_path / "c", "wiki", sync=False)
    first.close()
    Corpus(tmp_path / "c", "wiki", sync=False).close()  # the lock went with the first


def test_a_search_over_a_store_that_moved_answers_the_store_s_text(corpus: Corpus) -> None:
    before = corpus.search("capital of Norway", k=1)
    assert before.hits[0].text == "Oslo is the capital of Norway."
    # what another writer of the same folder would do: the row changes under this index
    new = Document("oslo", "Oslo", "Oslo is the capital of Norway, rewritten elsewhere.")
    env = corpus._env  # noqa: SLF001 - planting the disagreement a second writer causes
    with env.begin(write=True, db=corpus._docs) as txn:  # noqa: SLF001
        txn.put(b"oslo", encode_doc(new, 77))
    after = corpus.search("capital of Norway", k=1)
    assert after.hits[0].text == new.text and after.hits[0].version == 77
    assert RecordVersion("corpus/wiki/doc/oslo", 77) in after.reads
    assert corpus.rebuilds == 1
    assert corpus.search("capital of Norway", k=1) == after and corpus.rebuilds == 1


def test_a_removed_row_under_the_index_is_dropped_not_an_error(corpus: Corpus) -> None:
    with corpus._env.begin(write=True, db=corpus._docs) as txn:  # noqa: SLF001
        txn.delete(b"oslo")
    assert [h.doc_id for h in corpus.search("Norway", k=3).hits] == []
    assert corpus.rebuilds == 1 and len(corpus) == len(DOCS) - 1


# --- titles ------------------------------------------------------------------------------------

def test_titles_page_through_every_document_in_id_order(corpus: Corpus) -> None:
    first, more = corpus.titles("", 2)
    assert [d for d, _, _ in first] == ["bonham", "oslo"] and more
    second, more = corpus.titles(first[-1][0], 2)
    assert [d for d, _, _ in second] == ["paris", "peart"] and more
    last, more = corpus.titles(second[-1][0], 2)
    assert last == [("rush", 0, "Rush")] and not more
    assert corpus.titles("rush", 2) == ([], False) and corpus.titles("zzz", 2) == ([], False)
    written = corpus.write_documents([Document("oslo", "Oslo (city)", "Oslo.")])
    version = {r.record_id: r.version for r in written}["corpus/wiki/doc/oslo"]
    assert ("oslo", version, "Oslo (city)") in corpus.titles("", 10)[0]


def test_the_lmdb_environment_is_closed_with_the_corpus(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "c", "wiki", sync=False)
    corpus.close()
    corpus.close()  # twice is fine
    with pytest.raises(lmdb.Error):
        corpus._env.stat()  # noqa: SLF001
