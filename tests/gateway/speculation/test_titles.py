"""CorpusTitles: corpus titles named in the observation, an incremental index, HotpotQA hit rate."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.corpus import Corpus, Document
from services.corpus.loaders import HOTPOTQA_FILE, default_data_dir, load_corpus
from services.gateway.speculation.predictors import (
    CompositePredictor,
    ObservationEntities,
    PredictionContext,
    default_predictor,
)
from services.gateway.speculation.titles import (
    TITLE_TIE_STEP,
    TITLE_WEIGHT,
    CorpusTitles,
    base_form,
    normalized,
)
from services.gateway.tools.retrieve import format_hits

COORD = "react/think"
DOCS = [
    Document("journey", "Journey (band)", "Journey is an American rock band formed in 1973."),
    Document("smith-m", "Steve Smith (musician)", "Steve Smith is an American jazz drummer."),
    Document("smith-c", "Steve Smith (cricketer)", "Steve Smith is an Australian cricketer."),
    Document("perry", "Steve Perry", "Steve Perry is an American singer."),
    Document("the", "The", "The is a definite article."),
    Document("rock", "Rock music", "Rock music is a genre of popular music."),
]
PASSAGE = ("[1] Journey (band)\nJourney is an American rock band. Its drummer Steve Smith, a "
           "jazz musician, joined in 1978; Steve Smith left in 1985. The singer was Steve Perry."
           "\n\n[2] Rock music\nRock music is a genre.")


def names(ranking: list) -> list[str]:
    return [r.candidate for r in ranking]


def ctx(observation: str, *candidates: str, exclude: tuple[str, ...] = ()) -> PredictionContext:
    return PredictionContext(tuple(candidates), observation, exclude)


@pytest.fixture
def corpus(tmp_path: Path) -> Iterator[Corpus]:
    with Corpus(tmp_path / "corpus", "wiki", sync=False, refresh_fraction=10.0) as c:
        c.load_documents(DOCS)
        yield c


def test_base_form_drops_the_parenthetical_and_case() -> None:
    assert base_form("Steve Smith (musician)") == "steve smith"
    assert base_form("Léon: The Professional") == "léon the professional"
    assert normalized("Steve Smith (musician)") == "steve smith musician"


def test_ranks_titles_by_their_base_form_and_disambiguates_by_qualifier(corpus: Corpus) -> None:
    ranking = CorpusTitles(corpus).rank(COORD, ctx(PASSAGE))
    # "musician" occurs in the text: the musician outranks the cricketer of the same name
    assert names(ranking)[:3] == ["Steve Smith (musician)", "Steve Smith (cricketer)",
                                  "Steve Perry"]
    assert abs(sum(r.probability for r in ranking) - 1.0) < 1e-9
    assert [r.rank for r in ranking] == list(range(len(ranking)))


def test_titles_of_equal_score_keep_their_order_in_their_probabilities(tmp_path: Path) -> None:
    docs = [Document("perry", "Steve Perry", "Steve Perry is an American singer."),
            Document("schon", "Neal Schon", "Neal Schon is an American guitarist."),
            Document("rock", "Rock music", "Rock music is a genre.")]
    with Corpus(tmp_path / "c", "wiki", sync=False, refresh_fraction=10.0) as c:
        c.load_documents(docs)
        titles = CorpusTitles(c)
        text = "Steve Perry sang Rock music with Neal Schon."
        ranking = titles.rank(COORD, ctx(text))
        # one mention each: the first mentioned first, and no two share a probability
        # (admission would take them for a tie), nothing moved by more than the step
        assert names(ranking) == ["Steve Perry", "Rock music", "Neal Schon"]
        assert len({r.probability for r in ranking}) == 3
        assert ranking[0].probability - ranking[2].probability == pytest.approx(
            2 * TITLE_TIE_STEP / 3, rel=1e-3)
        # where the entity extractor names the same titles, its order (the latest mention
        # first) stands in the composite
        merged = default_predictor(k=3, extra=[(titles, TITLE_WEIGHT)]).rank(COORD, ctx(text))
        assert names(merged)[:2] == ["Neal Schon", "Steve Perry"]
        assert len({r.probability for r in merged}) == len(merged)


def test_returned_passages_and_excluded_candidates_are_not_proposed(corpus: Corpus) -> None:
    titles = CorpusTitles(corpus)
    found = names(titles.rank(COORD, ctx(PASSAGE, exclude=("Steve Perry",))))
    assert "Journey (band)" not in found and "Rock music" not in found  # already read
    assert "Steve Perry" not in found
    assert "The" not in found  # a lone clause opener is never a mention


def test_mentions_must_read_as_names(corpus: Corpus) -> None:
    titles = CorpusTitles(corpus)
    assert titles.rank(COORD, ctx("they play rock music and journey on")) == []
    assert names(titles.rank(COORD, ctx("Is Journey older than Rock music?"))) == [
        "Journey (band)", "Rock music"]
    assert titles.rank(COORD, ctx("")) == []


def test_a_bounded_space_keeps_only_its_candidates(corpus: Corpus) -> None:
    ranking = CorpusTitles(corpus).rank(COORD, ctx(PASSAGE, "Steve Perry", "other"))
    assert names(ranking) == ["Steve Perry"]


def test_index_follows_corpus_writes_incrementally(corpus: Corpus) -> None:
    titles = CorpusTitles(corpus)
    assert titles.refresh() and not titles.refresh()  # built once; unchanged corpus: no work
    assert titles.rank(COORD, ctx("Neal Schon played guitar.")) == []
    corpus.write_documents([Document("schon", "Neal Schon", "Neal Schon is a guitarist.")])
    assert names(titles.rank(COORD, ctx("Neal Schon played guitar."))) == ["Neal Schon"]
    corpus.write_documents([Document("schon", "Neal Schon (guitarist)", "A guitarist.")])
    assert names(titles.rank(COORD, ctx("Neal Schon played guitar."))) == [
        "Neal Schon (guitarist)"]
    corpus.write_documents(removals=["schon"])
    assert titles.rank(COORD, ctx("Neal Schon played guitar.")) == []
    assert len(titles.index) == len(DOCS)


def test_titles_shared_by_documents_stay_until_the_last_goes(tmp_path: Path) -> None:
    with Corpus(tmp_path / "c", "m", sync=False) as corpus:
        corpus.load_documents([Document("a#1", "Oslo", "x"), Document("a#2", "Oslo", "y")])
        titles = CorpusTitles(corpus)
        corpus.write_documents(removals=["a#1"])
        assert names(titles.rank(COORD, ctx("Oslo is cold."))) == ["Oslo"]
        corpus.write_documents(removals=["a#2"])
        assert titles.rank(COORD, ctx("Oslo is cold.")) == []


def test_default_predictor_with_and_without_titles(corpus: Corpus) -> None:
    plain = default_predictor()
    assert "Steve Smith (musician)" not in names(plain.rank(COORD, ctx(PASSAGE)))
    merged = default_predictor(extra=[(CorpusTitles(corpus), 2.0)])
    assert names(merged.rank(COORD, ctx(PASSAGE)))[0] == "Steve Smith (musician)"


def test_ranking_a_large_title_set_names_only_titles_the_text_mentions() -> None:
    """100,000 titles: the ranking is full and every ranked title is one the text names (its
    speed is a benchmark's business, not a test's)."""
    titles = CorpusTitles(titles=[f"Person {i} Name (role {i % 7})" for i in range(100_000)])
    text = " ".join(f"Person {i} Name met Person {i + 1} Name." for i in range(0, 400, 2))
    ranking = titles.rank(COORD, ctx(text))
    assert len(ranking) == titles.limit
    mentioned = {f"Person {i} Name (role {i % 7})" for i in range(401)}
    assert all(r.candidate in mentioned for r in ranking)


# --- HotpotQA: the hop-2 entity, as the react harness observes it -----------------------------

@pytest.mark.skipif(not (default_data_dir() / HOTPOTQA_FILE).exists(),
                    reason="shared HotpotQA sample absent")
def test_hotpotqa_hop2_entity_top3_hit_rate() -> None:
    from loadgen.workloads.react import load_react

    with tempfile.TemporaryDirectory() as folder, \
            Corpus(Path(folder) / "c", "hotpotqa", sync=False) as corpus:
        load_corpus(corpus, "hotpotqa", None)
        titles = CorpusTitles(corpus)
        entities = CompositePredictor([(ObservationEntities(), 1.0)], k=3)
        composite = default_predictor(extra=[(titles, 2.0)])
        hits = {"titles": 0, "entities": 0, "composite": 0}
        questions = load_react()
        for q in questions:
            first, second = q.entities
            # the harness's hop-2 observation: hop 1's retrieve stage (react.yaml: k=3)
            observation = format_hits(corpus.search(first, k=3).hits)
            context = ctx(observation, exclude=(first,))
            for name, predictor in (("titles", titles), ("entities", entities),
                                    ("composite", composite)):
                hits[name] += second in names(predictor.rank(COORD, context))[:3]
            composite.observe(COORD, first)
            composite.observe(COORD, second)
    rates = {name: count / len(questions) for name, count in hits.items()}
    print(f"\nhop-2 entity in top 3 over {len(questions)} HotpotQA questions: {rates}")
    assert rates["titles"] > rates["entities"]
    assert rates["composite"] >= 0.4
