"""Routing over BFCL function calls (dynbranch §2.1, §5.1; template ``routing``).

One workflow per BFCL request: the router decodes which of the request's functions serves it
(``offered`` = the request's function names, a bounded exclusive branch), then the chosen
function's handler writes the call and the executor runs it. The decision is BFCL's ground truth:
the function the reference answer calls (``possible_answer/``), since the simulated router decodes
pseudo-text; the sim supplies the decode's timing, the data set the choice.

Requests with one function have no branch and are skipped; parallel categories route on their
first reference call (one router round per workflow). ``offered`` keeps BFCL's own function order:
it is the order the request lists its functions in, which does not depend on the reference answer
(``loadgen.arms.leak_guard`` checks that shuffling it leaves the predictors' coverage unchanged).
Instances are drawn from the workload's ``split`` only; the word-overlap weight and the prior are
fitted on the train split (``loadgen.arms.leak_guard.fit``).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.workloads.base import Decision, Trace, Workload, data_path, read_jsonl, sample

#: BFCL categories with several candidate functions per request.
DEFAULT_CATEGORIES = ("multiple", "live_multiple")


def bfcl_files(category: str) -> tuple[str, str]:
    """The questions and the possible answers of one BFCL category."""
    return (f"bfcl/BFCL_v4_{category}.jsonl", f"bfcl/possible_answer/BFCL_v4_{category}.jsonl")


@dataclass(frozen=True, slots=True)
class RoutingInstance:
    """One BFCL request: its query, functions (JSON), offered names and the chosen function."""

    key: str
    query: str
    functions: str
    offered: tuple[str, ...]
    choice: str


def _query(record: dict[str, Any]) -> str:
    turn = record["question"][0]
    return "\n".join(m["content"] for m in turn if m.get("role") == "user")


def _instance(record: dict[str, Any], answer: dict[str, Any]) -> RoutingInstance | None:
    offered = tuple(dict.fromkeys(f["name"] for f in record["function"]))
    truth = answer.get("ground_truth") or []
    if len(offered) < 2 or not truth:
        return None
    choice = next(iter(truth[0]))
    if choice not in offered:
        return None
    functions = json.dumps(record["function"], sort_keys=True, ensure_ascii=False)
    return RoutingInstance(record["id"], _query(record), functions, offered, choice)


def load_routing(data_dir: str | Path | None = None,
                 categories: tuple[str, ...] = DEFAULT_CATEGORIES) -> list[RoutingInstance]:
    """Every routable request of ``categories``, questions joined with answers by id."""
    found: list[RoutingInstance] = []
    for category in categories:
        question_file, answer_file = bfcl_files(category)
        questions = data_path(data_dir, question_file)
        answers = {a["id"]: a for a in read_jsonl(data_path(data_dir, answer_file))}
        for record in read_jsonl(questions):
            inst = _instance(record, answers.get(record["id"], {}))
            if inst is not None:
                found.append(inst)
    return found


class RoutingWorkload(Workload):
    """Router → handler → executor over BFCL requests."""

    name = "routing"
    fits_overlap_weight = True
    paper_profile = {"replay_rate": 0.45}
    template = "routing"
    decision_stage = "router"
    default_replay = 0.25  # exact replays of earlier requests (dynbranch Fig. 10: 0.22-0.77)
    data_files = tuple(f for c in DEFAULT_CATEGORIES for f in bfcl_files(c))

    def __init__(self, data_dir: str | Path | None = None,
                 categories: tuple[str, ...] = DEFAULT_CATEGORIES, **split: Any) -> None:
        super().__init__(data_dir, **split)
        self.categories = categories

    def load(self) -> list[RoutingInstance]:
        """Every routable request."""
        return load_routing(self.data_dir, self.categories)

    def decisions(self, n: int, rng: random.Random) -> list[Decision]:
        """The router's decision per instance: the offered functions, the query, the choice."""
        return [Decision("routing/router", i.offered, i.choice, head=i.query)
                for i in self.instances(n, rng)]

    def instances(self, n: int, rng: random.Random) -> list[RoutingInstance]:
        """``n`` distinct requests of this workload's split."""
        return sample(self.split_pool(), n, rng, "BFCL requests")

    async def run(self, trace: Trace, instance: RoutingInstance) -> None:
        """Router (opens the branch), then the chosen handler and executor."""
        inputs = {"functions": instance.functions, "query": instance.query}
        await trace.call("router", inputs=inputs, offered=instance.offered,
                         observation=instance.query)  # what the router reads
        # The router's text is the sim's pseudo-text: the decision is BFCL's ground truth.
        handler = await trace.call("handler", inputs=inputs, candidate=instance.choice)
        await trace.call("executor", inputs=inputs, outputs={"handler": handler},
                         candidate=instance.choice)


__all__ = ["DEFAULT_CATEGORIES", "RoutingInstance", "RoutingWorkload", "load_routing"]
