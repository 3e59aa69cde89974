"""What every workload harness shares: data access, the simulated clock, per-stage records.

A harness turns records of a public data set into workflow *instances* (frozen values, generated
from a seeded ``random.Random`` so a schedule is reproducible) and runs one instance as a sequence
of stage calls through the client SDK (``services.gateway.sdk.DynbranchClient``).

Splits: anything learned or tuned from a data set (the gateway's frequency prior, the word-overlap
weight) is fitted on a seeded *train* split of its instances and measured on the disjoint *test*
split; ``split_of`` assigns an instance key to one of them and every ``Workload.instances`` draws
from ``Workload.split`` only ("test" unless asked otherwise).

Decisions come from the data set. With the simulated engine a deciding stage decodes pseudo-text,
so the harness cannot parse a choice out of it: the sim models the *timing* of the decode, the
data set's ground truth supplies the *decision* (the function BFCL's reference answer calls, the
entities HotpotQA's supporting facts name, MuSiQue's decomposition order, the option the SGD
user picked). Every arm of an experiment therefore takes the same path through each workflow.

The resolution window of a model-decided branch is the deciding stage's decode. The harness may
cap it (``decision_max_tokens``, the ``window`` profile): the deciding stage is then called with
that ``max_tokens`` (``Trace.max_tokens``), so the decision resolves while its fills still run.
Only the deciding stage is capped, and no candidate stage renders from its output (a template
lets a subgraph read its deciding stage only under a user's window), so every candidate stage
still renders exactly as its fill does.

Latency is measured in simulated seconds, on the run's clock (``SimClock``): on the virtual mesh
(``loadgen.meshes.virtual``) the event loop's virtual time, where only the engines' simulated work,
waits and a modelled cost per hop pass; on the live mesh wall seconds divided by the engines'
``time_scale``, where whatever the gateway, gRPC and this harness add in wall time is inflated by
``1 / time_scale``. Each call also records its time outside the engine (its latency less the
engine time that answered it and the time it waited on another request's engine work); a call
whose time outside exceeds ``STALL_S`` is a stall, and a workflow with one fails.
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import random
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from services.corpus import DataUnavailable, data_path, read_jsonl
from services.gateway import DynbranchClient

#: Share of a data set's instances in the train split (the rest is the test split).
TRAIN_FRACTION = 0.3
SPLITS = ("train", "test")

#: ``ResultSource`` values as short names.
SOURCE_NAMES = {0: "unspecified", 1: "engine", 2: "library", 3: "promoted_fill", 4: "joined"}


#: Simulated seconds a call may spend outside the engine (gateway, hops, the harness) before it
#: counts as a stall (stalls of 2-10 s were seen on the live mesh).
STALL_S = 0.25


class SimClock:
    """Converts between the loop's seconds (``now``: wall time, or a virtual clock) and the
    engines' simulated seconds."""

    def __init__(self, time_scale: float, now: Callable[[], float] = time.perf_counter) -> None:
        if time_scale <= 0:
            raise ValueError(f"time_scale must be > 0 to measure simulated seconds, "
                             f"got {time_scale}")
        self.time_scale = time_scale
        self._now = now

    def wall(self) -> float:
        """The clock's seconds now (monotonic)."""
        return self._now()

    def sim_since(self, wall_start: float) -> float:
        """Simulated seconds elapsed since ``wall_start``."""
        return (self._now() - wall_start) / self.time_scale

    def to_wall(self, sim_s: float) -> float:
        """Clock seconds of ``sim_s`` simulated seconds."""
        return sim_s * self.time_scale

    def to_sim(self, wall_s: float) -> float:
        """Simulated seconds of ``wall_s`` clock seconds."""
        return wall_s / self.time_scale


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
    #: Simulated seconds outside the engine: latency less the engine time that answered it and
    #: the time it waited on another request's engine work (a fill, a joined execution).
    outside_s: float = 0.0
    #: Simulated seconds it waited on another request's engine work: a fill it adopted (served
    #: by it, or given up and run anew) or a joined execution.
    waited_s: float = 0.0
    #: What the engine that answered reported (0 where nothing ran: a library hit): prompt
    #: tokens, those served from its prefix cache, completion tokens and decode seconds (the
    #: engine's own timing). Per-token decode time is what co-resident fills inflate.
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    decode_s: float = 0.0

    @property
    def stalled(self) -> bool:
        """Whether the call spent longer than ``STALL_S`` outside the engine."""
        return self.outside_s > STALL_S


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

    def stalls(self) -> int:
        """Calls that stalled (``StageRecord.stalled``)."""
        return sum(1 for s in self.stages if s.stalled)

    def sources(self) -> dict[str, int]:
        """Calls per result source."""
        counts: dict[str, int] = {}
        for s in self.stages:
            counts[s.source] = counts.get(s.source, 0) + 1
        return counts


def _engine_report(reply: Any) -> tuple[int, int, int, float]:
    """(prompt tokens, cached prompt tokens, completion tokens, decode s) of a gateway reply;
    zeros where it carries none."""
    usage, timings = getattr(reply, "usage", None), getattr(reply, "timings", None)
    if usage is None or timings is None:
        return 0, 0, 0, 0.0
    return (usage.prompt_tokens, usage.cached_prompt_tokens, usage.completion_tokens,
            timings.decode_s)


@dataclass(slots=True)
class Trace:
    """Runs one workflow's stage calls through the SDK and records them."""

    client: DynbranchClient
    template: str
    workflow_id: str
    clock: SimClock
    stages: list[StageRecord] = field(default_factory=list)
    #: Per stage id, the ``max_tokens`` its calls decode at most instead of the template's
    #: (``Workload.stage_max_tokens``: the deciding stage under a capped window).
    max_tokens: Mapping[str, int] = field(default_factory=dict)

    async def call(self, stage: str, *, inputs: Mapping[str, str],
                   outputs: Mapping[str, str] | None = None, candidate: str | None = None,
                   offered: Sequence[str] = (), observation: str = "",
                   post_click: bool = False) -> str:
        """Call one template stage; return its text."""
        start = self.clock.wall()
        reply = await self.client.call_stage(
            self.template, stage, workflow_id=self.workflow_id, inputs=inputs, outputs=outputs,
            candidate=candidate, offered=offered, observation=observation,
            max_tokens=self.max_tokens.get(stage))
        latency = self.clock.sim_since(start)
        engine_s = reply.timings.total_s if hasattr(reply, "timings") else latency
        waited = self.clock.to_sim(getattr(reply, "waited_s", 0.0))
        self.stages.append(StageRecord(stage, candidate or "", reply.text,
                                       SOURCE_NAMES.get(reply.source, str(reply.source)),
                                       latency, post_click,
                                       max(0.0, latency - engine_s - waited), waited,
                                       *_engine_report(reply)))
        return reply.text

    async def user_wait(self, sim_s: float) -> None:
        """The user thinks for ``sim_s`` simulated seconds."""
        await asyncio.sleep(self.clock.to_wall(sim_s))

    async def settle(self, coordinate: str, selected: str) -> None:
        """Report a harness-side resolution (``""``: none of the candidates was selected)."""
        await self.client.settle(self.workflow_id, coordinate, selected)


@dataclass(frozen=True, slots=True)
class Decision:
    """One branch as the gateway sees it, with the selection that resolved it."""

    coordinate: str
    candidates: tuple[str, ...]
    truth: str
    #: The observation is ``head`` followed by ``parts`` (the pieces a shuffle may reorder).
    head: str = ""
    parts: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    @property
    def observation(self) -> str:
        """The observation text the harness passes."""
        return self.head + "".join(self.parts)

    def shuffled(self, rng: random.Random) -> Decision:
        """This decision with its candidate list (and observation parts) in ``rng``'s order."""
        return replace(self, candidates=tuple(rng.sample(self.candidates, len(self.candidates))),
                       parts=tuple(rng.sample(self.parts, len(self.parts))))


class Workload(abc.ABC):
    """A paper workload: instances from a data set, and how to run one through the gateway."""

    #: Workload name (``routing``, ``react``, ``subagent``, ``hci``).
    name: ClassVar[str]
    #: The built-in template it runs.
    template: ClassVar[str]
    #: The gateway's retrieval corpus it needs (``corpus_source``), "" for none.
    corpus_source: ClassVar[str] = ""
    #: The shared data set files it reads, its corpus's included (checked before a run starts).
    data_files: ClassVar[tuple[str, ...]] = ()
    #: Share of a schedule's workflows that replay an earlier instance exactly (C1 recurrence).
    default_replay: ClassVar[float] = 0.0
    #: Whether the reported latency is the user turn after a click rather than end to end.
    post_click_latency: ClassVar[bool] = False
    #: The ``paper`` recurrence profile's options for this workload (``profiles.PROFILES``).
    paper_profile: ClassVar[Mapping[str, Any]] = {}
    #: The stage whose decode resolves the workload's branches ("" when a user resolves them):
    #: the one ``decision_max_tokens`` caps.
    decision_stage: ClassVar[str] = ""
    #: Poisson rate λ (workflows per simulated s) of the workload's low load in ``bench arms``.
    low_rate: ClassVar[float] = 0.12
    #: Whether the leak guard fits the predictor's word-overlap weight on the train split
    #: (the workloads whose candidates are named by a query); others keep the gateway's 2.0.
    fits_overlap_weight: ClassVar[bool] = False

    def __init__(self, data_dir: str | Path | None = None, *, split: str = "test",
                 split_seed: int = 0, replay_rate: float | None = None,
                 decision_max_tokens: int | None = None) -> None:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if decision_max_tokens is not None and (not self.decision_stage
                                                or decision_max_tokens < 1):
            raise ValueError(f"decision_max_tokens {decision_max_tokens}: needs a deciding "
                             f"stage that decodes and a cap >= 1 ({self.name!r} deciding stage: "
                             f"{self.decision_stage or 'none, a user decides'})")
        #: The deciding stage's decode cap (None: the template's): how short its window is.
        self.decision_max_tokens = decision_max_tokens
        rate = self.default_replay if replay_rate is None else replay_rate
        if not 0 <= rate < 1:
            raise ValueError(f"replay_rate must be in [0, 1), got {rate}")
        #: Share of a schedule's workflows replaying an earlier one exactly (Fig. 10 sweeps it).
        self.replay_rate = rate
        self.data_dir = data_dir
        #: Which split ``instances`` draws from: "test" to measure, "train" to fit.
        self.split = split
        self.split_seed = split_seed
        self._pool: list[Any] | None = None

    @property
    def stage_max_tokens(self) -> dict[str, int]:
        """``Trace.max_tokens`` of this harness: the deciding stage's cap, when set."""
        cap = self.decision_max_tokens
        return {self.decision_stage: cap} if cap is not None else {}

    def pool(self) -> list[Any]:
        """Every usable instance of the data set, both splits (loaded once, on first use)."""
        if self._pool is None:
            self._pool = self.load()
        return self._pool

    def split_pool(self, split: str | None = None) -> list[Any]:
        """The instances of ``split`` (default: this workload's), in data-set order."""
        which = self.split if split is None else split
        return [i for i in self.pool() if split_of(i.key, self.split_seed) == which]

    @abc.abstractmethod
    def load(self) -> list[Any]:
        """Every usable instance of the data set, read from ``data_dir``."""

    @abc.abstractmethod
    def instances(self, n: int, rng: random.Random) -> list[Any]:
        """``n`` distinct instances drawn with ``rng`` (deterministic for a seed)."""

    def decisions(self, n: int, rng: random.Random) -> list[Decision]:
        """The branch decisions of ``n`` instances drawn with ``rng``, as the gateway would see
        them (candidates as the harness offers them, the observation, the selection); what the
        leak guard ranks. Every registered workload has them (``tests/test_registries.py``)."""
        raise NotImplementedError(f"workload {self.name!r} does not list its decisions")

    @abc.abstractmethod
    async def run(self, trace: Trace, instance: Any) -> None:
        """Run one instance's stages through ``trace``."""

    def measured(self, stages: Sequence[StageRecord], latency_s: float) -> float:
        """The reported latency of a workflow run."""
        if self.post_click_latency:
            return sum(s.latency_s for s in stages if s.post_click)
        return latency_s


def split_of(key: str, seed: int = 0, train_fraction: float = TRAIN_FRACTION) -> str:
    """The split of the instance called ``key``: a seeded hash, so stable and disjoint."""
    digest = hashlib.sha256(f"{seed}|{key}".encode()).digest()
    return "train" if int.from_bytes(digest[:8], "big") / 2**64 < train_fraction else "test"


def recurrence(units: Sequence[Hashable]) -> float:
    """Share of ``units`` (in arrival order) equal to an earlier one."""
    seen: set[Hashable] = set()
    repeats = 0
    for u in units:
        repeats += u in seen
        seen.add(u)
    return repeats / len(units) if units else 0.0


def draw_recurring(pool: Sequence[Any], n: int, rng: random.Random,
                   units: Callable[[Any], Sequence[Hashable]], target: float, what: str,
                   repeat: bool = False) -> list[Any]:
    """``n`` instances of ``pool`` whose units recur across the draw at a share near ``target``.

    Greedy: while the realized share is below ``target`` the next instance is one sharing a unit
    with those drawn so far (chosen with ``rng``), otherwise one sharing none. Only when the data
    carry no sharing instance and ``repeat`` is set is an earlier instance drawn again.
    """
    if n > len(pool) and not repeat:
        raise ValueError(f"asked for {n} {what} but the data set yields only {len(pool)}")
    by_unit: dict[Hashable, list[int]] = {}
    for i, inst in enumerate(pool):
        for u in dict.fromkeys(units(inst)):
            by_unit.setdefault(u, []).append(i)
    order = rng.sample(range(len(pool)), len(pool))
    chosen: list[int] = []
    seen: set[Hashable] = set()
    sharing: set[int] = set()
    total = repeats = 0
    while len(chosen) < n:
        pick = _next_index(order, chosen, sharing, rng, total > 0 and repeats < target * total,
                           repeat, seen, pool, units)
        if pick is None:
            raise ValueError(f"asked for {n} {what} but the data set yields only {len(pool)}")
        chosen.append(pick)
        for u in units(pool[pick]):
            total += 1
            repeats += u in seen
            if u not in seen:
                seen.add(u)
                sharing.update(by_unit.get(u, ()))
    return [pool[i] for i in chosen]


def _next_index(order: list[int], chosen: list[int], sharing: set[int], rng: random.Random,
                want: bool, repeat: bool, seen: set[Hashable], pool: Sequence[Any],
                units: Callable[[Any], Sequence[Hashable]]) -> int | None:
    used = set(chosen)
    if want:
        shared = sorted(sharing - used)
        if shared:
            return rng.choice(shared)
        if repeat and chosen:
            return rng.choice(chosen)
    fresh = [i for i in order if i not in used]
    clean = next((i for i in fresh if not any(u in seen for u in units(pool[i]))), None)
    return clean if clean is not None else (fresh[0] if fresh else None)


def sample(pool: Sequence[Any], n: int, rng: random.Random, what: str) -> list[Any]:
    """``n`` distinct items of ``pool`` drawn with ``rng``; a clear error when too few."""
    if n > len(pool):
        raise ValueError(f"asked for {n} {what} but the data set yields only {len(pool)}")
    return rng.sample(list(pool), n)


__all__ = ["Decision",
    "SOURCE_NAMES",
    "SPLITS",
    "STALL_S",
    "TRAIN_FRACTION",
    "DataUnavailable",
    "SimClock",
    "StageRecord",
    "Trace",
    "WorkflowResult",
    "Workload",
    "data_path",
    "draw_recurring",
    "read_jsonl",
    "recurrence",
    "sample",
    "split_of",
]
