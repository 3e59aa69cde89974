"""LADS workloads as data: shapes, exact history sizes, seeds, context fit, cohort service."""

from __future__ import annotations

import csv
import html
from collections import Counter

import pytest

from loadgen.workloads import lads_web
from loadgen.workloads.lads import (
    CONTEXT_LIMIT,
    HISTORY_LENGTHS,
    LadsWorkload,
    cohort_release_times,
    cohort_workload,
    limit_time,
    release_time,
    web_burst_workload,
)
from services.corpus.loaders import DataUnavailable, default_data_dir
from services.engine_agent.sim.tokenizer import encode

needs_data = pytest.mark.skipif(not default_data_dir().exists(),
                                reason=f"shared data sets absent at {default_data_dir()}")
BUILDERS = {"cohort": cohort_workload, "web_burst": web_burst_workload}


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def workload(request: pytest.FixtureRequest) -> LadsWorkload:
    if not default_data_dir().exists():
        pytest.skip("shared data sets absent")
    return BUILDERS[request.param](1)


# -- shapes and sizes ---------------------------------------------------------------------------

def test_workload_has_sixteen_workflows_of_six_calls(workload: LadsWorkload) -> None:
    assert len(workload.workflows) == 16
    for w in workload.workflows:
        assert [c.turn for c in w.calls] == [0, 1, 2, 3, 4, 5]
        assert (w.calls[0].tool, w.calls[0].observation) == ("", "")
        assert all(c.observation and c.tool for c in w.calls[1:])
        assert all(c.tool_start_delay_s == 0.0 for c in w.calls)


def test_history_is_sized_in_sim_tokens_within_one_block(workload: LadsWorkload) -> None:
    for w in workload.workflows:
        assert w.history_tokens in HISTORY_LENGTHS
        assert abs(len(encode(w.history_text)) - w.history_tokens) <= 16


def test_observation_token_counts_match_the_tokenizer(workload: LadsWorkload) -> None:
    for w in workload.workflows:
        assert all(len(encode(c.observation)) == c.observation_tokens for c in w.calls)


def test_history_lengths_are_balanced(workload: LadsWorkload) -> None:
    counts = Counter(w.history_tokens for w in workload.workflows)
    assert counts == {length: 4 for length in HISTORY_LENGTHS}


def test_histories_share_no_cached_block(workload: LadsWorkload) -> None:
    first_tokens = {encode(w.history_text)[0] for w in workload.workflows}
    first_blocks = {encode(w.history_text)[:16] for w in workload.workflows}
    if workload.name == "cohort":
        assert len(first_tokens) == len(workload.workflows)
    assert len(first_blocks) == len(workload.workflows)


def test_last_prompt_fits_the_context_limit(workload: LadsWorkload) -> None:
    budget = workload.context_limit - workload.output_tokens
    for w in workload.workflows:
        observed = sum(len(encode(c.observation)) for c in w.calls)
        last = len(encode(w.history_text)) + 5 * workload.output_tokens + observed
        assert last == w.prompt_tokens(5, workload.output_tokens) and last < budget


def test_settings_follow_the_paper(workload: LadsWorkload) -> None:
    assert (workload.tool_service_s, workload.tool_limit_s) == (0.05, 60.0)
    assert (workload.output_tokens, workload.context_limit) == (64, CONTEXT_LIMIT)
    assert workload.link_bytes_per_s == 4000.0
    assert workload.sources and all(not s.startswith("/") for s in workload.sources)


def test_arrivals_form_a_half_second_burst(workload: LadsWorkload) -> None:
    assert all(0.0 <= w.arrival_s <= 0.5 for w in workload.workflows)


# -- seeds ----------------------------------------------------------------------------------------

@needs_data
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_same_seed_gives_the_same_workload(name: str) -> None:
    assert BUILDERS[name](3) == BUILDERS[name](3)


@needs_data
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_other_seed_changes_arrivals_and_assignment(name: str) -> None:
    first, other = BUILDERS[name](3), BUILDERS[name](4)
    assert [w.arrival_s for w in first.workflows] != [w.arrival_s for w in other.workflows]
    assert ([w.history_tokens for w in first.workflows]
            != [w.history_tokens for w in other.workflows])


@needs_data
def test_web_observations_do_not_depend_on_the_seed() -> None:
    first, other = web_burst_workload(3), web_burst_workload(4)
    assert ([w.calls for w in first.workflows] == [w.calls for w in other.workflows])


@needs_data
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_building_a_workload_twice_with_one_seed_gives_the_same_workflows(name: str) -> None:
    first, again = BUILDERS[name](11), BUILDERS[name](11)
    assert first.workflows and [w.calls for w in first.workflows] == [
        w.calls for w in again.workflows]


def test_missing_data_root_names_the_folder(tmp_path) -> None:
    with pytest.raises(DataUnavailable, match="swe_agent_trajectories"):
        cohort_workload(1, data_root=tmp_path)


# -- workload specifics -----------------------------------------------------------------------

@needs_data
def test_cohort_workload_has_two_cohorts_of_eight() -> None:
    workload = cohort_workload(1)
    assert workload.cohort_size == 8
    assert [len(workload.cohort_members(c)) for c in (0, 1)] == [8, 8]
    sizes = [c.payload_bytes for w in workload.workflows for c in w.calls[1:]]
    assert min(sizes) >= 250 and max(sizes) <= 3000 and len(set(sizes)) > 40


@needs_data
def test_web_burst_is_one_cohort_of_sixteen_shopping_tasks() -> None:
    workload = web_burst_workload(1)
    assert workload.cohort_size == 16 and len(workload.cohort_members(0)) == 16
    intents = [t.intent for t in lads_web.shopping_tasks(16)]
    pairs = zip(workload.workflows, intents, strict=True)
    assert all(w.history_text.startswith(intent) for w, intent in pairs)
    tools = [c.tool for c in workload.workflows[0].calls[1:]]
    assert tools == ["open", "read_reviews", "open", "read_reviews", "open"]


@needs_data
def test_web_observations_name_real_products_and_reviews() -> None:
    names = _csv_column("ConfigurableSampleData_products.csv", "name")
    reviewers = _csv_column("ReviewSampleData_products_reviews.csv", "reviewer")
    for w in web_burst_workload(1).workflows:
        opened, reviews = w.calls[1].observation, w.calls[2].observation
        assert opened.splitlines()[0] in names | _gear_names()
        assert "<p>" not in opened and len(opened.encode()) <= lads_web.MAX_OBSERVATION_BYTES
        assert any(f"by {r}" in reviews for r in reviewers)


def test_keyword_match_prefers_named_products() -> None:
    if not default_data_dir().exists():
        pytest.skip("shared data sets absent")
    products, matched = lads_web.pick_products("Show me a duffle bag for the gym", 1, 3)
    assert matched >= 1 and "Duffle" in products[0].name
    fallback, none = lads_web.pick_products("Tell me the status of my latest order", 96, 3)
    assert none == 0 and len(set(fallback)) == 3


def _csv_column(name: str, column: str) -> set[str]:
    path = default_data_dir() / "magento_luma_shopping" / name
    csv.field_size_limit(1 << 24)
    with path.open(encoding="utf-8", newline="") as rows:
        return {html.unescape(row[column]).strip() for row in csv.DictReader(rows)}


def _gear_names() -> set[str]:
    folder = default_data_dir() / "magento_luma_shopping"
    return {n for p in folder.glob("*gear*.csv") for n in _csv_column(p.name, "name")}


# -- cohort tool service ----------------------------------------------------------------------

def test_full_round_releases_together_after_the_last_start() -> None:
    starts = {"a": 1.0, "b": 1.2, "c": 3.0}
    assert cohort_release_times(starts) == pytest.approx({m: 3.05 for m in starts})


def test_straggler_beyond_the_limit_forces_partial_release() -> None:
    starts = {"a": 0.0, "b": 10.0, "c": 100.0}
    assert cohort_release_times(starts, 0.05, 60.0) == pytest.approx(
        {"a": 60.0, "b": 70.0, "c": 100.05})


def test_release_waits_while_mates_may_still_start_in_time() -> None:
    starts, members = {"a": 0.0, "b": 1.0}, ("a", "b", "c")
    assert release_time(starts, members, "a") is None
    assert release_time(starts, members, "a", now=30.0) is None
    assert limit_time(starts, "a") == 60.0


def test_release_is_the_limit_once_no_mate_can_beat_it() -> None:
    starts, members = {"a": 0.0, "b": 1.0}, ("a", "b", "c")
    assert release_time(starts, members, "a", now=60.0) == 60.0
    assert release_time(starts, members, "b", now=60.0) is None


def test_release_is_determined_when_every_member_started() -> None:
    starts, members = {"a": 0.0, "b": 1.0, "c": 2.5}, ("a", "b", "c")
    assert release_time(starts, members, "b") == pytest.approx(2.55)
    assert release_time({"a": 0.0, "b": 80.0}, ("a", "b"), "a") == 60.0


def test_release_of_a_member_that_has_not_started_is_refused() -> None:
    with pytest.raises(ValueError, match="'c'"):
        release_time({"a": 0.0}, ("a", "c"), "c")
