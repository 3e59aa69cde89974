"""Sub-Agent orchestration over MuSiQue decompositions (dynbranch §2.1, §5.1; ``subagent``).

A question's single-hop decomposition gives its sub-tasks. A hop may refer to an earlier hop's
answer (``#k``); the harness resolves it only with what hop k's sub-agent *produced in this run*
(its ``read`` output), never with MuSiQue's reference answer, so no sub-task text holds an answer
the workflow has not produced. Per sub-task, in the decomposition's order (ground truth; the
simulated planner decodes pseudo-text): ``plan`` offers the sub-tasks that are *ready*, i.e.
not yet run and with every referenced hop already answered (a bounded exclusive branch, shuffled
with the run's seed), then that sub-agent's ``retrieve`` → ``read`` chain runs over the gateway's
corpus (``corpus_source=musique``); ``synthesis`` closes the workflow.

Recurrence across runs comes from the data: MuSiQue reuses single-hop questions across questions
(the same hop ``id``). ``instances`` draws questions so that a share ``subtask_recurrence`` of the
draw's sub-tasks repeat one drawn before (dynbranch §2.2: 26%). A sub-task is identified by
``hop_key``: its text with each ``#k`` replaced by hop k's key. The retrieve → read chain depends
only on the sub-task text, so equal keys give byte-identical stage inputs on a deterministic engine.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadgen.workloads.base import Decision, Trace, Workload, data_path, draw_recurring, read_jsonl
from services.corpus.loaders import MUSIQUE_FILE

DECOMPOSITIONS_FILE = "musique/musique_ans_v1.0_dev_decompositions.jsonl"
#: dynbranch §2.2: 26% of Sub-Agent sub-tasks recur across runs.
SUBTASK_RECURRENCE = 0.26
_REF = re.compile(r"#(\d+)")


@dataclass(frozen=True, slots=True)
class SubagentInstance:
    """One question, its hop templates (``#k`` unresolved) and their recurrence keys."""

    key: str
    question: str
    hops: tuple[str, ...]
    keys: tuple[str, ...]
    #: Seeds the shuffle of each plan step's offered sub-tasks (set by ``instances``).
    seed: int = 0


def refs(hop: str) -> set[int]:
    """The 0-based indices of the hops ``hop`` refers to."""
    return {int(k) - 1 for k in _REF.findall(hop)}


def hop_templates(decomposition: list[dict[str, Any]]) -> tuple[str, ...] | None:
    """The hops' questions, ``#k`` kept; None when a reference is not to an earlier hop."""
    hops = tuple(" ".join(h["question"].split()) for h in decomposition)
    ok = all(h and all(0 <= k < i for k in refs(h)) for i, h in enumerate(hops))
    return hops if ok and len(set(hops)) == len(hops) else None


def resolve(hop: str, produced: Mapping[int, str]) -> str | None:
    """``hop`` with ``#k`` replaced by what hop k produced; None while one is missing."""
    if not refs(hop) <= set(produced):
        return None
    return _REF.sub(lambda m: produced[int(m.group(1)) - 1], hop)


def hop_keys(hops: Sequence[str]) -> tuple[str, ...]:
    """Recurrence keys: each hop with ``#k`` replaced by ``[key of hop k]``."""
    keys: list[str] = []
    for hop in hops:
        keys.append(_REF.sub(lambda m: f"[{keys[int(m.group(1)) - 1]}]", hop))
    return tuple(keys)


def ready(hops: Sequence[str], done: Mapping[int, str]) -> list[int]:
    """Hops not yet run whose referenced hops have all produced an answer."""
    return [j for j, h in enumerate(hops) if j not in done and refs(h) <= set(done)]


def plan_steps(instance: SubagentInstance, produced: Callable[[int, str], str]
               ) -> list[tuple[tuple[str, ...], str]]:
    """``(offered, chosen)`` per plan step, offered shuffled with the instance's seed.

    ``produced(j, subtask)`` is what hop j's sub-agent returned for ``subtask`` (the run's read
    output, or a stand-in offline).
    """
    rng = random.Random(instance.seed)
    done: dict[int, str] = {}
    steps = []
    for i, hop in enumerate(instance.hops):
        offered = [resolve(instance.hops[j], done) or "" for j in ready(instance.hops, done)]
        rng.shuffle(offered)
        chosen = resolve(hop, done) or ""
        steps.append((tuple(offered), chosen))
        done[i] = produced(i, chosen)
    return steps


def load_subagent(data_dir: str | Path | None = None) -> list[SubagentInstance]:
    """Every question with at least two hops whose references all point backwards."""
    found = []
    for record in read_jsonl(data_path(data_dir, DECOMPOSITIONS_FILE)):
        hops = hop_templates(record["question_decomposition"])
        if hops and len(hops) >= 2:
            found.append(SubagentInstance(record["id"], record["question"], hops,
                                          hop_keys(hops)))
    return found


def answer_line(text: str) -> str:
    """A sub-agent's answer as a later sub-task quotes it: its first non-empty line."""
    return next((line.strip() for line in text.splitlines() if line.strip()), text.strip())


class SubagentWorkload(Workload):
    """plan → (retrieve → read) per sub-task → synthesis, over MuSiQue decompositions."""

    name = "subagent"
    template = "subagent"
    decision_stage = "plan"
    corpus_source = "musique"
    data_files = (DECOMPOSITIONS_FILE, MUSIQUE_FILE)

    def __init__(self, data_dir: str | Path | None = None,
                 subtask_recurrence: float = SUBTASK_RECURRENCE, **split: Any) -> None:
        super().__init__(data_dir, **split)
        if not 0 <= subtask_recurrence < 1:
            raise ValueError("subtask_recurrence must be in [0, 1)")
        self.subtask_recurrence = subtask_recurrence

    def load(self) -> list[SubagentInstance]:
        """Every usable question."""
        return load_subagent(self.data_dir)

    def instances(self, n: int, rng: random.Random) -> list[SubagentInstance]:
        """``n`` distinct questions of the split; sub-tasks recur at ``subtask_recurrence``."""
        chosen = draw_recurring(self.split_pool(), n, rng, lambda i: i.keys,
                                self.subtask_recurrence, "MuSiQue questions")
        return [replace(inst, seed=rng.randrange(2**31)) for inst in chosen]

    def decisions(self, n: int, rng: random.Random) -> list[Decision]:
        """The plan decision per step: the sub-tasks offered (an earlier answer not yet
        produced stands in by its placeholder), and the one planned next."""
        return [Decision("subagent/plan", offered, chosen)
                for inst in self.instances(n, rng)
                for offered, chosen in plan_steps(inst, lambda j, _s: f"(answer of S{j + 1})")]

    async def run(self, trace: Trace, instance: SubagentInstance) -> None:
        """Dispatch each sub-task once its inputs exist, then synthesize."""
        rng = random.Random(instance.seed)
        done: dict[int, str] = {}
        findings: list[str] = []
        for i, hop in enumerate(instance.hops):
            offered = [resolve(instance.hops[j], done) or "" for j in ready(instance.hops, done)]
            rng.shuffle(offered)
            subtask = resolve(hop, done) or hop
            listing = "\n".join(f"S{k}. {s}" for k, s in enumerate(offered, start=1))
            inputs = {"question": instance.question, "subtasks": listing,
                      "findings": "\n".join(findings)}
            await trace.call("plan", inputs=inputs, offered=offered)
            passages = await trace.call("retrieve", inputs=inputs, candidate=subtask)
            answer = await trace.call("read", inputs=inputs, outputs={"retrieve": passages},
                                      candidate=subtask)
            done[i] = answer_line(answer)
            findings.append(f"{subtask}: {answer}")
        await trace.call("synthesis", inputs={"question": instance.question,
                                              "findings": "\n".join(findings)})


__all__ = ["SUBTASK_RECURRENCE", "SubagentInstance", "SubagentWorkload", "answer_line",
           "hop_keys", "hop_templates", "load_subagent", "plan_steps", "ready", "refs",
           "resolve"]
