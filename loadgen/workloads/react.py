"""ReAct multi-hop QA over HotpotQA (dynbranch §2.1, §5.1; template ``react``).

Per hop: ``think`` decodes the next entity (an open-vocabulary exclusive branch), ``retrieve``
fetches passages about it from the gateway's corpus (``corpus_source=hotpotqa``), ``read`` lists
the facts; two hops, then a final ``think`` that answers (Finish), after which the harness settles
the last branch with no selection. The entities are the question's supporting-fact titles in hop
order (ground truth; the simulated think decodes pseudo-text). Each ``think`` passes the context
already read as ``observation`` so the gateway's entity predictor can rank candidates: the
question, followed by the previous hop's retrieval output after the first hop (what the agent
itself sees when it decides).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.workloads.base import Trace, Workload, data_path, read_jsonl, sample

HOTPOTQA_FILE = "hotpotqa/hotpot_dev_distractor_v1_sample200.jsonl"
COORDINATE = "react/think"


@dataclass(frozen=True, slots=True)
class ReactInstance:
    """One question and the entities its hops search, in order."""

    key: str
    question: str
    entities: tuple[str, ...]


def _mentions(text: str, title: str) -> bool:
    return title.split(" (")[0] in text  # "Steve Smith (musician)" is mentioned as "Steve Smith"


def hop_order(record: dict[str, Any]) -> tuple[str, ...]:
    """Supporting-fact titles in hop order: a bridge's first hop mentions the second's title."""
    titles = tuple(dict.fromkeys(title for title, _ in record["supporting_facts"]))
    if len(titles) != 2:
        return titles
    first, second = titles
    text = {title: "".join(sentences) for title, sentences in record["context"]}
    if _mentions(text.get(second, ""), first) and not _mentions(text.get(first, ""), second):
        return second, first
    return titles


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
    corpus_source = "hotpotqa"
    default_replay = 0.12  # dynbranch §2.2: 12% of ReAct retrievals recur within a run

    def __init__(self, data_dir: str | Path | None = None, hops: int = 2) -> None:
        super().__init__(data_dir)
        self.hops = hops

    def load(self) -> list[ReactInstance]:
        """Every usable question."""
        return load_react(self.data_dir, self.hops)

    def instances(self, n: int, rng: random.Random) -> list[ReactInstance]:
        """``n`` distinct questions."""
        return sample(self.pool(), n, rng, "HotpotQA questions")

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


__all__ = ["ReactInstance", "ReactWorkload", "hop_order", "load_react"]
