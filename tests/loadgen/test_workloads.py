"""Workload harnesses: instances from the shared data sets, ground-truth decisions, schedules."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import statistics
from dataclasses import dataclass
from typing import Any

import pytest

from loadgen.arms.runner import quantile, run_arms
from loadgen.meshes.config import MeshConfig
from loadgen.workloads import WORKLOADS, Trace, Workload, build_schedule, get_workload
from loadgen.workloads.base import data_path, read_jsonl, recurrence
from loadgen.workloads.hci import derive_pick, load_hci, think_time
from loadgen.workloads.react import HOTPOTQA_FILE, hop_order, load_react
from loadgen.workloads.routing import load_routing
from loadgen.workloads.schedule import arrival_times
from loadgen.workloads.subagent import hop_templates, load_subagent, plan_steps, resolve
from services.corpus.loaders import default_data_dir

needs_data = pytest.mark.skipif(not default_data_dir().exists(),
                                reason=f"shared data sets absent at {default_data_dir()}")


# -- generation from data ---------------------------------------------------------------------

@needs_data
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_schedule_is_deterministic_for_a_seed(name: str) -> None:
    workload = get_workload(name)
    first = build_schedule(workload, 10, seed=7)
    again = build_schedule(get_workload(name), 10, seed=7)
    other = build_schedule(workload, 10, seed=8)
    assert first == again and first.digest() == again.digest()
    assert first.digest() != other.digest()


@needs_data
def test_routing_choice_is_the_function_the_reference_answer_calls() -> None:
    answers = {a["id"]: a for a in read_jsonl(
        data_path(None, "bfcl/possible_answer/BFCL_v4_multiple.jsonl"))}
    pool = load_routing(categories=("multiple",))
    assert len(pool) == 200
    for inst in pool:
        assert inst.choice == next(iter(answers[inst.key]["ground_truth"][0]))
        assert inst.choice in inst.offered and len(inst.offered) >= 2
        assert [f["name"] for f in json.loads(inst.functions)] == list(inst.offered)


@needs_data
def test_react_entities_are_supporting_titles_ordered_without_the_supporting_text() -> None:
    pool = {i.key: i for i in load_react()}
    records = {r["_id"]: r for r in read_jsonl(data_path(None, HOTPOTQA_FILE))}
    for inst in pool.values():
        assert set(inst.entities) == {t for t, _ in records[inst.key]["supporting_facts"]}
    record = records["5a7f6fd75542992e7d278cfa"]
    blanked = {**record, "context": [[t, [""]] for t, _ in record["context"]]}
    assert hop_order(blanked) == hop_order(record)  # the paragraphs' text decides nothing


@needs_data
def test_subagent_references_resolve_only_with_what_the_run_produced() -> None:
    pool = {i.key: i for i in load_subagent()}
    inst = pool["2hop__460946_294723"]
    assert inst.hops == ("Green >> performer", "#1 >> spouse")
    assert resolve("#1 >> spouse", {}) is None
    assert resolve("#1 >> spouse", {0: "produced"}) == "produced >> spouse"
    assert hop_templates([{"question": "#2 of x"}, {"question": "y"}]) is None
    steps = plan_steps(inst, lambda j, _s: f"<run answer {j}>")
    assert steps == [(("Green >> performer",), "Green >> performer"),
                     (("<run answer 0> >> spouse",), "<run answer 0> >> spouse")]
    answers = {h["answer"] for r in read_jsonl(data_path(
        None, "musique/musique_ans_v1.0_dev_decompositions.jsonl")) for h in
        r["question_decomposition"]}
    for sample in list(pool.values())[:300]:
        for offered, _ in plan_steps(sample, lambda j, _s: f"<{j}>"):
            # a candidate holds only sub-task text and what the run produced: never a reference
            # answer that is not already written in the hop's own question
            assert all("#" not in o for o in offered)
    assert answers  # the reference answers exist, and the harness never reads them


@needs_data
def test_train_and_test_instances_are_disjoint() -> None:
    for name in sorted(WORKLOADS):
        train = {i.key for i in get_workload(name, split="train").split_pool()}
        test = {i.key for i in get_workload(name).split_pool()}
        assert train and test and not train & test
        drawn = get_workload(name).instances(20, random.Random(0))
        assert {i.key for i in drawn} <= test


@needs_data
def test_subagent_subtasks_recur_across_runs_at_the_papers_rate() -> None:
    for seed in (0, 1):
        drawn = get_workload("subagent").instances(200, random.Random(seed))
        assert len({i.key for i in drawn}) == 200
        assert abs(recurrence([k for i in drawn for k in i.keys]) - 0.26) < 0.03


@needs_data
def test_react_retrievals_recur_within_a_run_at_the_papers_rate() -> None:
    for seed in (0, 1):
        schedule = build_schedule(get_workload("react"), 100, seed=seed)
        entities = [e for a in schedule.arrivals for e in a.instance.entities]
        assert abs(recurrence(entities) - 0.12) < 0.03


@needs_data
@pytest.mark.parametrize("rate", [0.22, 0.5, 0.77])
def test_replay_rate_sweeps_exact_replays(rate: float) -> None:
    schedule = build_schedule(get_workload("routing", replay_rate=rate), 100, seed=0)
    assert sum(bool(a.replay_of) for a in schedule.arrivals) == round(100 * rate)
    again = build_schedule(get_workload("routing"), 100, seed=0, replay_rate=rate)
    assert again.arrivals == schedule.arrivals


def _turn(speaker: str, *acts: tuple[str, str, list[str]]) -> dict[str, Any]:
    return {"speaker": speaker, "utterance": "", "frames": [{"service": "S", "actions": [
        {"act": a, "slot": s, "values": v} for a, s, v in acts]}]}


@pytest.mark.parametrize(("user", "expected"), [
    (("SELECT", "", []), ("B", "select_offer")),
    (("SELECT", "name", ["C"]), ("C", "select")),
    (("INFORM", "name", ["C"]), ("C", "inform")),
    (("REQUEST_ALTS", "", []), ("", "request_alts")),
    (("REQUEST", "year", []), ("", "not_derivable")),
])
def test_hci_pick_comes_from_the_next_user_turn_or_the_turn_is_dropped(
        user: tuple, expected: tuple[str, str]) -> None:
    turns = [_turn("SYSTEM", ("OFFER", "name", ["B"])), _turn("USER", user),
             _turn("SYSTEM", ("OFFER", "name", ["A"]))]
    assert derive_pick(turns, 0, "S", "name", ("A", "B", "C"), "B") == expected


@needs_data
def test_hci_menus_are_shuffled_and_undecidable_turns_are_dropped_and_counted() -> None:
    workload = get_workload("hci")
    assert workload.dropped_turns > 0
    assert all(t.pick in t.offered and len(t.offered) >= 2
               for d in load_hci() for t in d.turns)
    turns = [t for d in workload.instances(100, random.Random(3)) for t in d.turns]
    first = sum(t.pick == t.offered[0] for t in turns) / len(turns)
    assert first < 0.6  # was ~0.9 when the offered option led the menu
    assert all(t.options.splitlines()[0].startswith(f"1. {t.offered[0]}") for t in turns)


def test_hci_think_time_is_lognormal_around_the_human_wait_window() -> None:
    rng = random.Random(1)
    samples = [think_time(rng) for _ in range(4000)]
    assert 2.5 < statistics.median(samples) < 2.9
    assert min(samples) >= 0.5 and max(samples) <= 10.0


# -- schedules ---------------------------------------------------------------------------------

def test_poisson_arrivals_start_at_zero_and_increase() -> None:
    times = arrival_times(200, random.Random(0), "poisson", rate=0.5)
    assert times[0] == 0.0 and times == sorted(times)
    assert 1.5 < statistics.mean(b - a for a, b in itertools.pairwise(times)) < 2.5
    assert arrival_times(3, random.Random(0), "serial", rate=0.5) == [0.0, 0.0, 0.0]


@dataclass(frozen=True, slots=True)
class _Item:
    key: str


class _Recorder(Workload):
    """A workload without stage calls that records when and what each arm ran."""

    name = "recorder"
    template = "routing"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str]] = []
        self.running = 0
        self.peak = 0

    def load(self) -> list[_Item]:
        return []  # instances are made up, not drawn from a data set

    def instances(self, n: int, rng: random.Random) -> list[_Item]:
        return [_Item(f"item-{rng.randrange(10**6)}") for _ in range(n)]

    async def run(self, trace: Trace, instance: _Item) -> None:
        self.seen.append((trace.workflow_id, instance.key))
        self.running += 1
        self.peak = max(self.peak, self.running)
        await asyncio.sleep(0.01)
        self.running -= 1


def test_replays_repeat_an_earlier_fresh_instance() -> None:
    schedule = build_schedule(_Recorder(), 20, seed=3, replay=0.25)
    replays = [a for a in schedule.arrivals if a.replay_of]
    by_id = {a.workflow_id: a for a in schedule.arrivals}
    assert len(replays) == 5 and not schedule.arrivals[0].replay_of
    assert all(by_id[a.replay_of].instance == a.instance and not by_id[a.replay_of].replay_of
               for a in replays)


@pytest.mark.parametrize("arrival", ["poisson", "serial"])
async def test_every_arm_runs_the_identical_schedule(arrival: str) -> None:
    workload = _Recorder()
    schedule = build_schedule(workload, 6, seed=5, arrival=arrival, rate=50.0, replay=0.3)
    arms = await run_arms(workload, schedule, MeshConfig(engines=1, preset="zero",
                                                         time_scale=0.01))
    expected = [(a.workflow_id, a.instance.key) for a in schedule.arrivals]
    assert list(arms) == ["floor", "c1", "c2", "full"]
    assert {a.schedule_digest for a in arms.values()} == {schedule.digest()}
    for arm in arms.values():
        assert [(r.workflow_id, r.key) for r in arm.results] == expected
    assert sorted(workload.seen) == sorted(expected * 4)
    assert (workload.peak == 1) == (arrival == "serial")


def test_quantile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert quantile(values, 0.99) == 99.0 and quantile(values, 0.5) == 50.0
    assert quantile([3.0], 0.99) == 3.0 and quantile([], 0.5) == 0.0
