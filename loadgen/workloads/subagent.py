"""Sub-Agent orchestration over MuSiQue decompositions (dynbranch §2.1, §5.1; ``subagent``).

A question's single-hop decomposition gives its sub-tasks; ``#k`` references are resolved with
hop k's reference answer, so a sub-task is a concrete sub-topic whose text recurs byte for byte
across questions (MuSiQue reuses single-hop questions). Per sub-task, in the decomposition's order
(ground truth; the simulated planner decodes pseudo-text): ``plan`` offers the remaining sub-tasks
(a bounded exclusive branch), then that sub-agent's ``retrieve`` → ``read`` chain runs over the
gateway's corpus (``corpus_source=musique``); ``synthesis`` closes the workflow.

Recurrence is built into the draw: a share of the workflows come in pairs of questions that share
a sub-task (dynbranch §2.2 measures 26% of sub-tasks recurring across runs).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.workloads.base import Trace, Workload, data_path, read_jsonl

DECOMPOSITIONS_FILE = "musique/musique_ans_v1.0_dev_decompositions.jsonl"
_REF = re.compile(r"#(\d+)")


@dataclass(frozen=True, slots=True)
class SubagentInstance:
    """One question and its resolved sub-tasks in dispatch order."""

    key: str
    question: str
    subtasks: tuple[str, ...]


def resolve_subtasks(decomposition: list[dict[str, Any]]) -> tuple[str, ...] | None:
    """Each hop's question with ``#k`` replaced by hop k's answer; None when one cannot be."""
    out = []
    for hop in decomposition:
        def answer(m: re.Match[str]) -> str:
            k = int(m.group(1))
            return decomposition[k - 1]["answer"] if 1 <= k <= len(decomposition) else m.group(0)
        text = " ".join(_REF.sub(answer, hop["question"]).split())
        if not text or _REF.search(text):
            return None
        out.append(text)
    return tuple(out) if len(set(out)) == len(out) else None


def load_subagent(data_dir: str | Path | None = None) -> list[SubagentInstance]:
    """Every question whose sub-tasks all resolve."""
    found = []
    for record in read_jsonl(data_path(data_dir, DECOMPOSITIONS_FILE)):
        subtasks = resolve_subtasks(record["question_decomposition"])
        if subtasks and len(subtasks) >= 2:
            found.append(SubagentInstance(record["id"], record["question"], subtasks))
    return found


def _shared_groups(pool: list[SubagentInstance]) -> list[list[int]]:
    """Indices of questions sharing a sub-task, one group per recurring sub-task (file order)."""
    groups: dict[str, list[int]] = {}
    for i, inst in enumerate(pool):
        for sub in inst.subtasks:
            groups.setdefault(sub, []).append(i)
    return [members for members in groups.values() if len(members) >= 2]


class SubagentWorkload(Workload):
    """plan → (retrieve → read) per sub-task → synthesis, over MuSiQue decompositions."""

    name = "subagent"
    template = "subagent"
    corpus_source = "musique"

    def __init__(self, data_dir: str | Path | None = None, shared_fraction: float = 0.5) -> None:
        super().__init__(data_dir)
        if not 0 <= shared_fraction <= 1:
            raise ValueError("shared_fraction must be in [0, 1]")
        self.shared_fraction = shared_fraction

    def load(self) -> list[SubagentInstance]:
        """Every usable question."""
        return load_subagent(self.data_dir)

    def instances(self, n: int, rng: random.Random) -> list[SubagentInstance]:
        """``n`` distinct questions; pairs sharing a sub-task make up ``shared_fraction``."""
        pool = self.pool()
        chosen: list[int] = []
        groups = _shared_groups(pool)
        for group in rng.sample(groups, min(len(groups), int(n * self.shared_fraction) // 2)):
            fresh = [i for i in group if i not in chosen]
            if len(fresh) >= 2:
                chosen += rng.sample(fresh, 2)
        taken = set(chosen)
        rest = [i for i in range(len(pool)) if i not in taken]
        chosen += rng.sample(rest, n - len(chosen))
        rng.shuffle(chosen)
        return [pool[i] for i in chosen]

    async def run(self, trace: Trace, instance: SubagentInstance) -> None:
        """Dispatch each sub-task in order, then synthesize."""
        listing = "\n".join(f"S{i}. {s}" for i, s in enumerate(instance.subtasks, start=1))
        findings: list[str] = []
        for i, subtask in enumerate(instance.subtasks):
            inputs = {"question": instance.question, "subtasks": listing,
                      "findings": "\n".join(findings)}
            await trace.call("plan", inputs=inputs, offered=instance.subtasks[i:])
            passages = await trace.call("retrieve", inputs=inputs, candidate=subtask)
            answer = await trace.call("read", inputs=inputs, outputs={"retrieve": passages},
                                      candidate=subtask)
            findings.append(f"{subtask}: {answer}")
        await trace.call("synthesis", inputs={"question": instance.question,
                                              "findings": "\n".join(findings)})


__all__ = ["SubagentInstance", "SubagentWorkload", "load_subagent", "resolve_subtasks"]
