"""ReAct multi-hop QA over HotpotQA (dynbranch §2.1, §5.1; template ``react``).

Per hop: ``think`` decodes the next entity (an open-vocabulary exclusive branch), ``retrieve``
fetches passages about it from the gateway's corpus (``corpus_source=hotpotqa``), ``read`` lists
the facts; two hops, then a final ``think`` that answers (Finish), after which the harness settles
the last branch with no selection. The entities are the question's supporting-fact titles (ground
truth; the simulated think decodes pseudo-text), in an order that carries no answer (``hop_order``).
Each ``think`` passes the context already read as ``observation`` so the gateway's entity
predictor can rank candidates: the question, followed by the previous hop's retrieval output after
the first hop (what the agent itself sees when it decides).

Recurrence is counted per *retrieval*, as the paper measured it (§2.2: 12% of ReAct retrievals
recur within a run): ``instances`` draws questions so that a share ``retrieval_recurrence`` of the
draw's retrievals repeat an earlier one. HotpotQA's questions rarely share a supporting title
(2 of 400 titles in the 200-question sample), so where the data carry no sharing question the
draw asks an earlier question again (a user repeating a question), which repeats its retrievals.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.workloads.base import Decision, Trace, Workload, data_path, draw_recurring, read_jsonl

HOTPOTQA_FILE = "hotpotqa/hotpot_dev_distractor_v1_sample200.jsonl"
COORDINATE = "react/think"
#: dynbranch §2.2: 12% of ReAct retrievals recur within a run.
RETRIEVAL_RECURRENCE = 0.12


@dataclass(frozen=True, slots=True)
class ReactInstance:
    """One question and the entities its hops search, in order."""

    key: str
    question: str
    entities: tuple[str, ...]


def _base(title: str) -> str:
    return title.split(" (")[0]  # "Steve Smith (musician)" is mentioned as "Steve Smith"


def hop_order(record: dict[str, Any]) -> tuple[str, ...]:
    """The supporting titles in an order that does not come from the supporting facts.

    The set of titles is the decision's ground truth; their *order* must not be read from the
    supporting paragraphs (which passage names which is exactly what the agent learns by reading
    them). So: titles the question itself names come first, in the order it names them (a bridge
    question names its first hop, a comparison question both); the rest follow in the order of
    the record's ``context`` list, which the distractor setting shuffles, so it carries no answer.
    """
    titles = list(dict.fromkeys(title for title, _ in record["supporting_facts"]))
    question = record["question"]
    context = [title for title, _ in record["context"]]
    named = sorted((question.find(_base(t)), t) for t in titles if _base(t) in question)
    first = [t for _, t in named]
    rest = sorted((t for t in titles if t not in first),
                  key=lambda t: context.index(t) if t in context else len(context))
    return tuple(first + rest)


def load_react(data_dir: str | Path | None = None, hops: int = 2) -> list[ReactInstance]:
    """Every question with exactly ``hops`` supporting titles."""
    found = []
    for record in read_jsonl(data_path(data_dir, HOTPOTQA_FILE)):
        entities = hop_order(record)
        if len(entities) == hops:
            found.append(ReactInstance(record["_id"], record["question"], entities))
    return found


class ReactWorkload(Workload):
    """think → retrieve(entity) → read per hop, over HotpotQA's distractor sample."""

    name = "react"
    template = "react"
    decision_stage = "think"
    corpus_source = "hotpotqa"
    data_files = (HOTPOTQA_FILE,)
    paper_profile = {"replay_rate": 0.5}
    default_replay = 0.0  # recurrence is per retrieval, in ``instances`` (not whole workflows)

    def __init__(self, data_dir: str | Path | None = None, hops: int = 2,
                 retrieval_recurrence: float = RETRIEVAL_RECURRENCE, **split: Any) -> None:
        super().__init__(data_dir, **split)
        if not 0 <= retrieval_recurrence < 1:
            raise ValueError("retrieval_recurrence must be in [0, 1)")
        self.hops = hops
        self.retrieval_recurrence = retrieval_recurrence

    def load(self) -> list[ReactInstance]:
        """Every usable question."""
        return load_react(self.data_dir, self.hops)

    def instances(self, n: int, rng: random.Random) -> list[ReactInstance]:
        """``n`` questions of the split whose retrievals recur at ``retrieval_recurrence``."""
        return draw_recurring(self.split_pool(), n, rng, lambda i: i.entities,
                              self.retrieval_recurrence, "HotpotQA questions", repeat=True)

    def decisions(self, n: int, rng: random.Random) -> list[Decision]:
        """The think decision per hop: the question, then the previous hop's passage as the
        retrieve tool prints it (its sentences are what a shuffle reorders); the space is open."""
        records = {r["_id"]: r for r in read_jsonl(data_path(self.data_dir, HOTPOTQA_FILE))}
        out = []
        for inst in rng.sample(self.split_pool(), n):
            paragraphs = {t: s for t, s in records[inst.key]["context"]}
            head, parts = inst.question, ()
            for j, entity in enumerate(inst.entities):
                out.append(Decision("react/think", (), entity, head, parts, inst.entities[:j]))
                head = f"{inst.question}\n\n[1] {entity}\n"
                parts = tuple(paragraphs.get(entity, ()))
        return out

    async def run(self, trace: Trace, instance: ReactInstance) -> None:
        """One think/retrieve/read round per entity, then the answering think."""
        notes, observation = "", instance.question
        for entity in instance.entities:
            inputs = {"question": instance.question, "notes": notes}
            await trace.call("think", inputs=inputs, observation=observation)
            passages = await trace.call("retrieve", inputs=inputs, candidate=entity)
            facts = await trace.call("read", inputs=inputs, outputs={"retrieve": passages},
                                     candidate=entity)
            notes = f"{notes}\n{entity}: {facts}" if notes else f"{entity}: {facts}"
            observation = f"{instance.question}\n\n{passages}"
        await trace.call("think", inputs={"question": instance.question, "notes": notes},
                         observation=observation)
        await trace.settle(COORDINATE, "")  # Finish: no entity was searched after it


__all__ = ["RETRIEVAL_RECURRENCE", "ReactInstance", "ReactWorkload", "hop_order", "load_react"]
