"""Candidate predictors: enumeration, frequency prior, observation entities, offered options."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from services.common.values.errors import InvalidArgument
from services.corpus.loaders import HOTPOTQA_FILE, default_data_dir
from services.gateway.speculation.predictors import (
    TIE_STEP,
    CompositePredictor,
    FrequencyPrior,
    ObservationEntities,
    OfferedOptions,
    PredictionContext,
    Predictor,
    TemplateEnumeration,
    context_for,
    default_predictor,
    extract_entities,
)
from services.gateway.templates import load_builtin

COORD = "routing/router"
HANDLERS = ("get_weather", "book_flight", "convert_units")


def names(ranking: list) -> list[str]:
    return [r.candidate for r in ranking]


def ctx(*candidates: str, observation: str = "", exclude: tuple[str, ...] = ()
        ) -> PredictionContext:
    return PredictionContext(tuple(candidates), observation, exclude)


# --- enumeration and prior -------------------------------------------------------------------

def test_enumeration_keeps_template_order_with_uniform_scores() -> None:
    ranking = TemplateEnumeration().rank(COORD, ctx(*HANDLERS, exclude=("book_flight",)))
    assert names(ranking) == ["get_weather", "convert_units"]
    assert [r.rank for r in ranking] == [0, 1] and [r.probability for r in ranking] == [0.5, 0.5]


def test_prior_falls_back_to_template_order_before_any_observation() -> None:
    ranking = FrequencyPrior().rank(COORD, ctx(*HANDLERS))
    assert names(ranking) == list(HANDLERS)
    assert [r.probability for r in ranking] == pytest.approx([1 / 3] * 3)


def test_prior_learns_online_with_laplace_smoothing() -> None:
    prior = FrequencyPrior(alpha=1.0)
    for selected in ["convert_units", "convert_units", "book_flight"]:
        prior.observe(COORD, selected)
    ranking = prior.rank(COORD, ctx(*HANDLERS))
    assert names(ranking) == ["convert_units", "book_flight", "get_weather"]
    assert [r.probability for r in ranking] == pytest.approx([3 / 6, 2 / 6, 1 / 6])


def test_prior_is_per_coordinate() -> None:
    prior = FrequencyPrior()
    prior.observe("other/stage", "convert_units")
    assert names(prior.rank(COORD, ctx(*HANDLERS)))[0] == "get_weather"
    assert prior.count("other/stage", "convert_units") == 1


def test_prior_ranks_past_selections_of_an_open_space() -> None:
    prior = FrequencyPrior()
    for entity in ["Rush", "Neil Peart", "Rush"]:
        prior.observe("react/think", entity)
    assert names(prior.rank("react/think", ctx())) == ["Rush", "Neil Peart"]


def test_prior_forgets_the_least_selected_past_its_bound() -> None:
    prior = FrequencyPrior(max_per_coordinate=2)
    for entity in ["a", "a", "b", "c"]:
        prior.observe("x/y", entity)
    assert sorted(names(prior.rank("x/y", ctx()))) == ["a", "c"]


def test_offered_options_ranks_only_what_the_harness_offered() -> None:
    prior = FrequencyPrior()
    options = OfferedOptions(prior)
    options.observe("hci/offer", "Tanpopo")
    options.observe("hci/offer", "Sushi Zone")
    ranking = options.rank("hci/offer", ctx("Bazille", "Tanpopo"))
    assert names(ranking) == ["Tanpopo", "Bazille"]
    assert options.rank("hci/offer", ctx()) == []


# --- entities --------------------------------------------------------------------------------

PASSAGE = ('Nobody\'s Hero\n"Nobody\'s Hero" is a song by Rush from the album "Counterparts". '
           "The lyrics were written by drummer Neil Peart. Peart wrote about a friend. "
           "The song was recorded in Toronto at Le Studio with Peter Collins. "
           "Collins produced it in 1993.")


def test_entities_include_quoted_titles_and_capitalized_names() -> None:
    found = [e for e, _ in extract_entities(PASSAGE)]
    assert {"Counterparts", "Neil Peart", "Peter Collins", "Toronto", "Le Studio"} <= set(found)


def test_partial_mentions_count_for_the_full_name() -> None:
    scores = dict(extract_entities(PASSAGE))
    assert scores["Neil Peart"] == 2 and "Peart" not in scores
    assert scores["Peter Collins"] == 2 and "Collins" not in scores


def test_sentence_openers_are_not_entities() -> None:
    found = [e for e, _ in extract_entities("The band toured. After that, Rush split.")]
    assert found == ["Rush"]


def test_excluded_entities_and_their_parts_are_skipped() -> None:
    found = [e for e, _ in extract_entities(PASSAGE, exclude=["Nobody's Hero (song)"])]
    assert "Nobody's Hero" not in found and "Hero" not in found


def test_ties_go_to_longer_then_more_recent_names() -> None:
    found = [e for e, _ in extract_entities("He met Anna Berg in Oslo, then Bergen, then Lund.")]
    assert found[:4] == ["Anna Berg", "Lund", "Bergen", "Oslo"]


def test_observation_entities_rank_the_previous_passage() -> None:
    ranking = ObservationEntities().rank("react/think",
                                         ctx(observation=PASSAGE, exclude=("Nobody's Hero",)))
    assert names(ranking)[:2] == ["Peter Collins", "Neil Peart"]  # tie: the later one first
    assert sum(r.probability for r in ranking) == pytest.approx(1.0)
    # its order within a count is a ranking: no two share a probability (admission would take
    # them for a tie), and nothing moves by more than the step
    first, second = ranking[0].probability, ranking[1].probability
    assert first > second and first == pytest.approx(second, abs=10 * TIE_STEP)
    assert len({r.probability for r in ranking}) == len(ranking)


# --- composite and context -------------------------------------------------------------------

def test_composite_merges_cuts_to_k_and_forwards_observations() -> None:
    predictor = default_predictor(k=2)
    assert isinstance(predictor, Predictor)
    predictor.observe(COORD, "convert_units")
    ranking = predictor.rank(COORD, ctx(*HANDLERS))
    assert names(ranking) == ["convert_units", "get_weather"]
    assert [r.rank for r in ranking] == [0, 1] and sum(r.probability for r in ranking) < 1


def test_composite_keeps_bounded_spaces_closed_and_skips_exclusions() -> None:
    predictor = default_predictor(k=5)
    predictor.observe(COORD, "delete_account")  # selected once, not offered now
    ranking = predictor.rank(COORD, ctx(*HANDLERS, exclude=("get_weather",)))
    assert names(ranking) == ["book_flight", "convert_units"]


def test_composite_proposes_entities_for_an_open_space() -> None:
    ranking = default_predictor(k=3).rank("react/think", ctx(observation=PASSAGE))
    assert names(ranking) == ["Peter Collins", "Neil Peart", "Nobody's Hero"]


def test_composite_weights_members() -> None:
    prior = FrequencyPrior()
    prior.observe(COORD, "book_flight")
    predictor = CompositePredictor([(prior, 0.0), (TemplateEnumeration(), 1.0)], k=3)
    assert names(predictor.rank(COORD, ctx(*HANDLERS))) == list(HANDLERS)
    with pytest.raises(InvalidArgument):
        CompositePredictor([], k=0)


def test_context_follows_the_decision_point() -> None:
    routing = load_builtin("routing").decision("routing/router")
    assert context_for(routing, offered=["a", "b", "a"]).candidates == ("a", "b")
    with pytest.raises(InvalidArgument, match="offered"):
        context_for(routing)
    react = load_builtin("react").decision("react/think")
    assert context_for(react, observation="x").candidates == ()


# --- real data -------------------------------------------------------------------------------

HOTPOTQA = default_data_dir() / HOTPOTQA_FILE
_PAREN = re.compile(r"\s*\([^)]*\)\s*$")


def _bridge_hops(path: Path) -> list[tuple[str, str, str]]:
    """(first-hop title, its paragraph, second-hop title) of HotpotQA bridge questions."""
    hops = []
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        titles = list(dict.fromkeys(t for t, _ in record["supporting_facts"]))
        if record["type"] != "bridge" or len(titles) != 2:
            continue
        context = {t: "".join(s) for t, s in record["context"]}
        first, second = titles
        if _PAREN.sub("", first).casefold() in context[second].casefold():
            first, second = second, first
        hops.append((first, context[first], second))
    return hops


@pytest.mark.skipif(not HOTPOTQA.exists(), reason=f"shared data set absent: {HOTPOTQA}")
def test_entities_cover_the_next_hotpotqa_hop_in_the_top_three_often() -> None:
    hops = _bridge_hops(HOTPOTQA)
    predictor = ObservationEntities()
    hits = sum(_PAREN.sub("", nxt).casefold() in
               [r.candidate.casefold() for r in predictor.rank(
                   "react/think", ctx(observation=f"{title}\n{text}", exclude=(title,)))[:3]]
               for title, text, nxt in hops)
    assert len(hops) > 100 and hits / len(hops) >= 0.35  # 0.40 at the time of writing


def test_lexical_overlap_ranks_offered_names_by_words_shared_with_the_request() -> None:
    from services.gateway.speculation.predictors import LexicalOverlap, PredictionContext

    context = PredictionContext(("get_weather", "book_flight", "convert_currency"),
                                "Please book a flight to Rome on Friday", ())
    ranked_ = LexicalOverlap().rank("routing/router", context)
    assert [r.candidate for r in ranked_] == ["book_flight"]
    assert LexicalOverlap().rank("routing/router", PredictionContext((), "book", ())) == []
    excluded = PredictionContext(context.candidates, context.observation, ("book_flight",))
    assert LexicalOverlap().rank("routing/router", excluded) == []


def test_default_predictor_puts_the_lexical_match_first_among_offered() -> None:
    from services.gateway.speculation.predictors import PredictionContext, default_predictor

    context = PredictionContext(("get_weather", "convert_currency", "book_flight"),
                                "I need to book a flight", ())
    assert default_predictor(3).rank("routing/router", context)[0].candidate == "book_flight"


def test_a_name_that_matches_two_fill_steps_is_ambiguous_and_matches_none() -> None:
    from services.common.values.reuse_name import ReuseName
    from services.gateway.speculation.state import Branch, Fill, FillStep
    from services.gateway.templates import load_builtin

    template = load_builtin("routing")
    branch = Branch(id="b", tenant="t", workflow_id="w", template=template,
                    point=template.decisions[0], inputs={}, outputs={}, model="m",
                    request_id="r")
    name, other = ReuseName("t", "a" * 64), ReuseName("t", "b" * 64)
    branch.fills["x"] = Fill("x", 0, [FillStep("handler", name)])
    assert branch.match(name) == (branch.fills["x"], branch.fills["x"].steps[0])
    branch.fills["y"] = Fill("y", 1, [FillStep("handler", name), FillStep("executor", other)])
    assert branch.match(name) is None  # ambiguity is a miss
    assert branch.match(other) == (branch.fills["y"], branch.fills["y"].steps[1])
