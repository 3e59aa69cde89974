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

from loadgen.arms import MeshConfig, quantile, run_arms
from loadgen.workloads import WORKLOADS, Trace, Workload, build_schedule, get_workload
from loadgen.workloads.base import data_path, read_jsonl
from loadgen.workloads.hci import derive_pick, load_hci, think_time
from loadgen.workloads.react import HOTPOTQA_FILE, load_react
from loadgen.workloads.routing import load_routing
from loadgen.workloads.schedule import arrival_times
from loadgen.workloads.subagent import load_subagent, resolve_subtasks
from services.gateway.tools.loaders import default_data_dir

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
def test_react_entities_are_supporting_titles_in_hop_order() -> None:
    pool = {i.key: i for i in load_react()}
    # "Counterparts" is a song on Nobody's Hero's page, which names drummer Neil Peart.
    assert pool["5a7f6fd75542992e7d278cfa"].entities == ("Nobody's Hero", "Neil Peart")
    records = {r["_id"]: r for r in read_jsonl(data_path(None, HOTPOTQA_FILE))}
    for inst in pool.values():
        assert set(inst.entities) == {t for t, _ in records[inst.key]["supporting_facts"]}


@needs_data
def test_subagent_subtasks_follow_the_decomposition_with_answers_resolved() -> None:
    pool = {i.key: i for i in load_subagent()}
    assert pool["2hop__460946_294723"].subtasks == ("Green >> performer",
                                                   "Steve Hillage >> spouse")
    assert resolve_subtasks([{"question": "#2 of x", "answer": "a"}]) is None


@needs_data
def test_subagent_draw_includes_questions_sharing_a_subtask() -> None:
    instances = get_workload("subagent").instances(12, random.Random(0))
    subtasks = [s for inst in instances for s in inst.subtasks]
    assert len({i.key for i in instances}) == 12
    assert len(set(subtasks)) < len(subtasks)  # some sub-task recurs across requests


def _turn(speaker: str, *acts: tuple[str, str, list[str]]) -> dict[str, Any]:
    return {"speaker": speaker, "utterance": "", "frames": [{"service": "S", "actions": [
        {"act": a, "slot": s, "values": v} for a, s, v in acts]}]}


@pytest.mark.parametrize(("user", "after", "expected"), [
    (("SELECT", "", []), None, ("A", "select")),
    (("SELECT", "name", ["B"]), None, ("B", "select")),
    (("INFORM", "name", ["C"]), None, ("C", "inform")),
    (("REQUEST_ALTS", "", []), ("OFFER", "name", ["B"]), ("B", "alternative")),
    (("REQUEST", "year", []), None, ("A", "default")),
])
def test_hci_pick_comes_from_the_next_user_turn(user: tuple, after: tuple | None,
                                                expected: tuple[str, str]) -> None:
    turns = [_turn("SYSTEM", ("OFFER", "name", ["A"])), _turn("USER", user)]
    if after is not None:
        turns.append(_turn("SYSTEM", after))
    assert derive_pick(turns, 0, "S", "name", ("A", "B", "C")) == expected


@needs_data
def test_hci_menus_offer_the_offered_option_first_and_pick_from_the_menu() -> None:
    pool = {d.key: d for d in load_hci()}
    first = pool["2_00000"].turns[0]
    assert first.offered[0] == "Alive" and first.pick == "Alive"  # the user asks for the year
    assert all(t.pick in t.offered and len(t.offered) >= 2
               for d in pool.values() for t in d.turns)


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
