"""The retrieve tool: BM25 over a versioned LMDB corpus, exact read-sets, writes, loaders."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.values.errors import FailedPrecondition, InvalidArgument, NotFound
from services.gateway.tools import Corpus, Document, RecordVersion, RetrieveTool
from services.gateway.tools.base import BUILTIN_TOOLS
from services.gateway.tools.loaders import (
    HOTPOTQA_FILE,
    MAGENTO_DIR,
    MUSIQUE_FILE,
    default_data_dir,
    hotpotqa_documents,
    load_corpus,
    magento_documents,
    musique_documents,
)
from services.gateway.tools.retrieve import NO_RESULTS

DOCS = [
    Document("rush", "Rush", "Rush is a Canadian rock band. Its drummer was Neil Peart."),
    Document("peart", "Neil Peart", "Neil Peart was the drummer and lyricist of Rush."),
    Document("bonham", "John Bonham", "John Bonham was the drummer of Led Zeppelin."),
    Document("paris", "Paris", "Paris is the capital of France."),
    Document("oslo", "Oslo", "Oslo is the capital of Norway."),
]
DATA = default_data_dir()


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


# --- the tool --------------------------------------------------------------------------------

def test_tool_runs_on_rendered_arguments(corpus: Corpus) -> None:
    tool = RetrieveTool(corpus)
    result = tool.run(b'{"k":"1","query":"capital of Norway"}')
    assert result.output == "[1] Oslo\nOslo is the capital of Norway." and result.complete
    assert result.reads == corpus.search("capital of Norway", k=1).reads
    assert tool.run({"query": "zebra"}).output == NO_RESULTS
    assert tool.identity == f"tool:retrieve/{corpus.identity}"
    assert BUILTIN_TOOLS["retrieve"].read_only is tool.read_only is True


@pytest.mark.parametrize("args, field", [
    (b"[1]", "args"), (b"{", "args"), ({"query": 3}, "args.query"),
    ({"query": "x", "k": 0}, "args.k"), ({"query": "x", "k": True}, "args.k"),
    ({"query": "x", "top": 2}, "args.top"),
])
def test_tool_refuses_bad_arguments_by_name(corpus: Corpus, args: object, field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        RetrieveTool(corpus).run(args)  # type: ignore[arg-type]
    assert err.value.field == field


# --- loaders ---------------------------------------------------------------------------------

def test_loaders_name_a_missing_data_file(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="hotpotqa"):
        list(hotpotqa_documents(tmp_path))


@pytest.mark.skipif(not (DATA / HOTPOTQA_FILE).exists(), reason=f"shared data absent: {DATA}")
def test_real_hotpotqa_sample_loads_and_answers_a_search(tmp_path: Path) -> None:
    with Corpus(tmp_path / "h", "hotpotqa", sync=False) as corpus:
        count = load_corpus(corpus, "hotpotqa")
        assert count == len(corpus) > 1000 and load_corpus(corpus, "hotpotqa") == 0
        hits = RetrieveTool(corpus).run({"query": "Neil Peart drummer", "k": 3}).output
        assert hits.startswith("[1] Neil Peart\n")


@pytest.mark.skipif(not (DATA / MUSIQUE_FILE).exists(), reason=f"shared data absent: {DATA}")
def test_real_musique_paragraphs_are_distinct_documents() -> None:
    docs = list(musique_documents())
    assert len(docs) == len({d.doc_id for d in docs}) > 3000


@pytest.mark.skipif(not (DATA / MAGENTO_DIR).exists(), reason=f"shared data absent: {DATA}")
def test_real_magento_products_have_text_without_html() -> None:
    docs = list(magento_documents())
    assert len(docs) > 150 and not any("<p>" in d.text for d in docs)


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


def test_tool_confirms_its_output_against_the_store(corpus: Corpus) -> None:
    tool = RetrieveTool(corpus)
    result = tool.run({"query": "capital of France", "k": 1})
    assert tool.confirm(result)
    corpus.write_documents([Document("paris", "Paris", "Paris is the capital of France!")])
    assert not tool.confirm(result)  # rewritten since: stale, never stored
    forged = type(result)("[1] Paris\nsomething else", result.reads, evidence=result.evidence)
    assert not tool.confirm(forged)  # output that is not the format of what was read
