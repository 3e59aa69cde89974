"""What every workload harness shares: data access, the simulated clock, per-stage records.

A harness turns records of a public data set into workflow *instances* (frozen values, generated
from a seeded ``random.Random`` so a schedule is reproducible) and runs one instance as a sequence
of stage calls through the client SDK (``services.gateway.sdk.DynbranchClient``).

Decisions come from the data set. With the simulated engine a deciding stage decodes pseudo-text,
so the harness cannot parse a choice out of it: the sim models the *timing* of the decode, the
data set's ground truth supplies the *decision* (the function BFCL's reference answer calls, the
entities HotpotQA's supporting facts name, MuSiQue's decomposition order, the option the SGD
user picked). Every arm of an experiment therefore takes the same path through each workflow.

Latency is measured in simulated seconds: wall seconds divided by the engines' ``time_scale``.
Whatever the gateway, gRPC and this harness add in wall time is thereby inflated by
``1 / time_scale`` (x20 at 0.05): a conservative bias against every mechanism that adds calls.
"""

from __future__ import annotations

import abc
import asyncio
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from services.gateway.sdk import DynbranchClient
from services.gateway.tools.loaders import DataUnavailable, data_path, read_jsonl

#: ``ResultSource`` values as short names.
SOURCE_NAMES = {0: "unspecified", 1: "engine", 2: "library", 3: "promoted_fill"}


class SimClock:
    """Converts between wall seconds and the engines' simulated seconds."""

    def __init__(self, time_scale: float) -> None:
        if time_scale <= 0:
            raise ValueError(f"time_scale must be > 0 to measure simulated seconds, "
                             f"got {time_scale}")
        self.time_scale = time_scale

    @staticmethod
    def wall() -> float:
        """Monotonic wall seconds."""
        return time.perf_counter()

    def sim_since(self, wall_start: float) -> float:
        """Simulated seconds elapsed since ``wall_start``."""
        return (time.perf_counter() - wall_start) / self.time_scale

    def to_wall(self, sim_s: float) -> float:
        """Wall seconds of ``sim_s`` simulated seconds."""
        return sim_s * self.time_scale


@dataclass(frozen=True, slots=True)
class StageRecord:
    """One stage call of a workflow: what it returned, from where, and how long it took."""

    stage: str
    candidate: str
    text: str
    source: str
    latency_s: float
    #: Counted in the user-turn latency (HCI: the stage after the user's click).
    post_click: bool = False


@dataclass(frozen=True, slots=True)
class WorkflowResult:
    """One workflow run: every stage's output and source, its latencies in simulated seconds."""

    workflow_id: str
    key: str
    stages: tuple[StageRecord, ...]
    latency_s: float
    #: The latency the paper reports for this workload: end to end, or post-click (HCI).
    measured_s: float
    error: str = ""

    def outputs(self) -> tuple[tuple[str, str, str], ...]:
        """``(stage, candidate, text)`` per call, in call order: what value equivalence compares."""
        return tuple((s.stage, s.candidate, s.text) for s in self.stages)

    def sources(self) -> dict[str, int]:
        """Calls per result source."""
        counts: dict[str, int] = {}
        for s in self.stages:
            counts[s.source] = counts.get(s.source, 0) + 1
        return counts


@dataclass(slots=True)
class Trace:
    """Runs one workflow's stage calls through the SDK and records them."""

    client: DynbranchClient
    template: str
    workflow_id: str
    clock: SimClock
    stages: list[StageRecord] = field(default_factory=list)

    async def call(self, stage: str, *, inputs: Mapping[str, str],
                   outputs: Mapping[str, str] | None = None, candidate: str | None = None,
                   offered: Sequence[str] = (), observation: str = "",
                   post_click: bool = False) -> str:
        """Call one template stage; return its text."""
        start = self.clock.wall()
        reply = await self.client.call_stage(
            self.template, stage, workflow_id=self.workflow_id, inputs=inputs, outputs=outputs,
            candidate=candidate, offered=offered, observation=observation)
        self.stages.append(StageRecord(stage, candidate or "", reply.text,
                                       SOURCE_NAMES.get(reply.source, str(reply.source)),
                                       self.clock.sim_since(start), post_click))
        return reply.text

    async def user_wait(self, sim_s: float) -> None:
        """The user thinks for ``sim_s`` simulated seconds."""
        await asyncio.sleep(self.clock.to_wall(sim_s))

    async def settle(self, coordinate: str, selected: str) -> None:
        """Report a harness-side resolution (``""``: none of the candidates was selected)."""
        await self.client.settle(self.workflow_id, coordinate, selected)


class Workload(abc.ABC):
    """A paper workload: instances from a data set, and how to run one through the gateway."""

    #: Workload name (``routing``, ``react``, ``subagent``, ``hci``).
    name: ClassVar[str]
    #: The built-in template it runs.
    template: ClassVar[str]
    #: The gateway's retrieval corpus it needs (``corpus_source``), "" for none.
    corpus_source: ClassVar[str] = ""
    #: Share of a schedule's workflows that replay an earlier instance exactly (C1 recurrence).
    default_replay: ClassVar[float] = 0.0
    #: Whether the reported latency is the user turn after a click rather than end to end.
    post_click_latency: ClassVar[bool] = False

    def __init__(self, data_dir: str | Path | None = None) -> None:
        self.data_dir = data_dir
        self._pool: list[Any] | None = None

    def pool(self) -> list[Any]:
        """Every usable instance of the data set (loaded once, on first use)."""
        if self._pool is None:
            self._pool = self.load()
        return self._pool

    @abc.abstractmethod
    def load(self) -> list[Any]:
        """Every usable instance of the data set, read from ``data_dir``."""

    @abc.abstractmethod
    def instances(self, n: int, rng: random.Random) -> list[Any]:
        """``n`` distinct instances drawn with ``rng`` (deterministic for a seed)."""

    @abc.abstractmethod
    async def run(self, trace: Trace, instance: Any) -> None:
        """Run one instance's stages through ``trace``."""

    def measured(self, stages: Sequence[StageRecord], latency_s: float) -> float:
        """The reported latency of a workflow run."""
        if self.post_click_latency:
            return sum(s.latency_s for s in stages if s.post_click)
        return latency_s


def sample(pool: Sequence[Any], n: int, rng: random.Random, what: str) -> list[Any]:
    """``n`` distinct items of ``pool`` drawn with ``rng``; a clear error when too few."""
    if n > len(pool):
        raise ValueError(f"asked for {n} {what} but the data set yields only {len(pool)}")
    return rng.sample(list(pool), n)


__all__ = [
    "SOURCE_NAMES",
    "DataUnavailable",
    "SimClock",
    "StageRecord",
    "Trace",
    "WorkflowResult",
    "Workload",
    "data_path",
    "read_jsonl",
    "sample",
]
