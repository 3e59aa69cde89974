"""Delivery policies: which ready frame to commit next (LADS §3.3, §3.6–3.7, §5.1).

Each policy sees one engine's inventory in FIFO order, its paced link and its lease book, and
returns a ``Choice`` (or None to hold, for the release-controlled baseline). One policy instance
serves one engine's link, so per-link state (the consecutive-promotion counter, the ledger)
lives on the instance. ``leases`` names the engine-side lease mode a policy needs: ``none``,
``lads`` (FIFO prefix leases under the demand budget), ``ttl`` (the simplified pin at tool
start), ``continuum`` or ``fixed_ttl`` (Continuum's pins); ``engine_queue`` the engine queue
order it assumes (``program`` for Continuum's program-level FCFS).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from services.common.values.leases import BudgetRecord, LeaseState, ResultKey, engine_queue_delay
from services.delivery.frames import Frame
from services.delivery.link import PacedLink
from services.delivery.records import LeaseEvidence, RecordBook

#: Committed protection occupancy U/C that turns the turnover override on (LADS §3.6).
DEFAULT_THETA = 0.75
#: Expected output tokens before any completion has been observed (the paper's output cap).
DEFAULT_EXPECTED_OUTPUT = 64.0
#: Weight of the expected output in Tail-aware Release's work estimate.
OUTPUT_WEIGHT = 4.0
#: Tools whose own output mean tail_aware keeps (a map per tool name from requests: bounded).
MAX_TOOLS = 1024


@dataclass(frozen=True, slots=True)
class DecisionView:
    """What a policy may read for one decision: the inventory, the link and the lease book."""

    now: float
    frames: tuple[Frame, ...]
    link: PacedLink
    book: RecordBook

    def __post_init__(self) -> None:
        if not self.frames:
            raise ValueError("frames must not be empty: there is nothing to choose from")


@dataclass(frozen=True, slots=True)
class Choice:
    """The frame to commit next; ``promoted`` when it departs from the Cache-first choice."""

    frame: Frame
    promoted: bool = False


@runtime_checkable
class DeliveryPolicy(Protocol):
    """A delivery policy for one engine's link."""

    name: str
    leases: str
    engine_queue: str

    def choose(self, view: DecisionView) -> Choice | None:
        """The frame to commit now, or None to hold until the next event."""
        ...

    def on_commit(self, choice: Choice) -> None:
        """``choice`` was committed (a preview that is not committed is never reported)."""
        ...

    def on_complete(self, key: ResultKey, output_tokens: int) -> None:
        """The continuation of a committed frame finished with ``output_tokens``."""
        ...


class _Base:
    """No-op hooks shared by the policies."""

    name: str = ""
    leases: str = "none"
    #: The engine queue order the policy's baseline assumes (the sim's ``queue_policy``).
    engine_queue: str = "fcfs"

    def on_commit(self, choice: Choice) -> None:
        """No state to update."""

    def on_complete(self, key: ResultKey, output_tokens: int) -> None:
        """No state to update."""


class FifoPolicy(_Base):
    """Earliest ready frame first (the ReAct reference)."""

    name = "fifo"

    def choose(self, view: DecisionView) -> Choice:
        """The head of the FIFO inventory."""
        return Choice(view.frames[0])


class SizeFirstPolicy(_Base):
    """Smallest frame first, ties in FIFO order."""

    name = "size_first"

    def choose(self, view: DecisionView) -> Choice:
        """The smallest payload (``min`` keeps the first, i.e. FIFO, among equals)."""
        return Choice(min(view.frames, key=lambda f: f.size))


def _resident(frame: Frame, ev: LeaseEvidence | None) -> bool:
    return frame.resident_blocks > 0 or (ev is not None and ev.state is LeaseState.ACTIVE)


def cache_first(frames: Sequence[Frame], evidence: Sequence[LeaseEvidence | None]) -> Frame:
    """LADS §3.3: resident history first, then the smaller frame, then FIFO order."""
    ranked = min(range(len(frames)),
                 key=lambda i: (not _resident(frames[i], evidence[i]), frames[i].size, i))
    return frames[ranked]


class CacheFirstPolicy(_Base):
    """Cache-first without leases: the paper's protection-free component control."""

    name = "cache_first"

    def choose(self, view: DecisionView) -> Choice:
        """The Cache-first choice, with lease evidence counted as residency when present."""
        evidence = [view.book.evidence(f, view.now) for f in view.frames]
        return Choice(cache_first(view.frames, evidence))


class LadsPolicy(_Base):
    """Cache-first plus quota-turnover promotions under protection pressure (LADS §3.6–3.7)."""

    name = "lads"
    leases = "lads"

    def __init__(self, *, theta: float = DEFAULT_THETA, turnover: bool = True) -> None:
        if not 0 < theta <= 1:
            raise ValueError(f"theta must be in (0, 1], got {theta!r}")
        self.theta = theta
        self.turnover = turnover
        self._departed = False  # the last commitment was a promotion (§3.7)

    def choose(self, view: DecisionView) -> Choice:
        """The highest-ρ eligible owner under pressure, else the Cache-first choice."""
        evidence = [view.book.evidence(f, view.now) for f in view.frames]
        base = cache_first(view.frames, evidence)
        budget = view.book.budget(view.now)
        if (not self.turnover or self._departed or budget is None
                or not self._pressure(budget, view.frames)):
            return Choice(base)
        pick = self._turnover_pick(view, budget, evidence)
        if pick is None or pick.key == base.key:
            return Choice(base)
        return Choice(pick, promoted=True)

    def on_commit(self, choice: Choice) -> None:
        """At most one consecutive departure: a promotion forces the next pick to Cache-first."""
        self._departed = choice.promoted

    def _pressure(self, budget: BudgetRecord, frames: Sequence[Frame]) -> bool:
        # §3.6: occupancy U >= θC with C > 0, or a fresh denial naming a frame still held.
        if budget.capacity > 0 and budget.protected >= self.theta * budget.capacity:
            return True
        denied = set(budget.denied)
        return any(f.key in denied for f in frames)

    def _turnover_pick(self, view: DecisionView, budget: BudgetRecord,
                       evidence: Sequence[LeaseEvidence | None]) -> Frame | None:
        best: tuple[float, int] | None = None
        engine_delay = engine_queue_delay(budget.waiting, budget.running, budget.max_running,
                                          budget.kappa_s)
        backlog = view.link.backlog_bytes(view.now)
        for k, (frame, ev) in enumerate(zip(view.frames, evidence, strict=True)):
            rho = _turnover_score(view, frame, ev, backlog, engine_delay)
            if rho is not None and (best is None or rho > best[0]):
                best = (rho, k)  # strict > keeps the earliest k_i among equal scores
        return None if best is None else view.frames[best[1]]


def _turnover_score(view: DecisionView, frame: Frame, ev: LeaseEvidence | None,
                    backlog: float, engine_delay: float) -> float | None:
    """ρ_i = E_i / ê_i for an eligible owner (LADS §3.6), None when not eligible."""
    if ev is None or ev.state is not LeaseState.ACTIVE or ev.exclusive <= 0:
        return None
    # T̂_i: handoff delay if sent next = link backlog plus this frame, plus the engine queue.
    handoff = ((backlog + view.link.framing_bytes + frame.size) / view.link.bytes_per_s
               + engine_delay)
    if not (0 < handoff < math.inf) or view.now + handoff > ev.deadline:
        return None
    return ev.exclusive / handoff


class LadsNoTurnoverPolicy(LadsPolicy):
    """LADS leases with quota-turnover priority disabled (the paper's Turnover-off control)."""

    name = "lads_no_turnover"

    def __init__(self, *, theta: float = DEFAULT_THETA, turnover: bool = False) -> None:
        super().__init__(theta=theta, turnover=turnover)


class TailAwarePolicy(_Base):
    """Delivery-side adaptation of Tail-aware Release (Feng et al. 2026, arXiv:2609.10964).

    Priority is the smallest work estimate: the full continuation prompt frozen at readiness
    plus ``OUTPUT_WEIGHT`` times the causal expected output (the running mean of completed
    outputs for the frame's tool, else over all tools, else ``default_output``). Release control
    keeps a model-completion ledger of committed, unfinished continuations and holds while the
    ledger is at least the engine's m with requests waiting (engine feedback from the fresh
    budget record; without one it never holds).
    """

    name = "tail_aware"

    def __init__(self, *, default_output: float = DEFAULT_EXPECTED_OUTPUT) -> None:
        self.default_output = float(default_output)
        self._ledger: dict[ResultKey, str] = {}  # committed key -> tool
        self._sums: dict[str, tuple[float, int]] = {}  # tool ("" = all) -> (sum, count)

    @property
    def ledger(self) -> int:
        """Committed continuations that have not completed."""
        return len(self._ledger)

    def expected_output(self, tool: str) -> float:
        """The causal mean output of ``tool``, falling back to all tools, then the default."""
        for name in (tool, ""):
            total, count = self._sums.get(name, (0.0, 0))
            if count:
                return total / count
        return self.default_output

    def work(self, frame: Frame) -> float:
        """work_i = prompt tokens + 4 × expected output."""
        return frame.prompt_tokens + OUTPUT_WEIGHT * self.expected_output(frame.tool)

    def choose(self, view: DecisionView) -> Choice | None:
        """The least-work frame, or None while the ledger fills the engine and requests wait."""
        budget = view.book.budget(view.now)
        if budget is not None and budget.waiting > 0 and self.ledger >= budget.max_running:
            return None
        return Choice(min(view.frames, key=self.work))

    def on_commit(self, choice: Choice) -> None:
        """Enter the committed continuation in the ledger."""
        self._ledger[choice.frame.key] = choice.frame.tool

    def on_abandon(self, key: ResultKey) -> None:
        """Retire ``key`` from the ledger without an output (its continuation failed)."""
        self._ledger.pop(key, None)

    def on_complete(self, key: ResultKey, output_tokens: int) -> None:
        """Retire ``key`` from the ledger and fold its output into the running means."""
        tool = self._ledger.pop(key, None)
        for name in {"", tool or ""}:
            if name not in self._sums and len(self._sums) > MAX_TOOLS:
                continue  # past MAX_TOOLS names a new tool only feeds the all-tools mean
            total, count = self._sums.get(name, (0.0, 0))
            self._sums[name] = (total + output_tokens, count + 1)


class TtlSimplePolicy(FifoPolicy):
    """FIFO delivery with the simplified TTL pin at tool start (the tool's mean duration when
    under 2 s); the pinning itself is the engine agent's (lease mode ``ttl``)."""

    name = "ttl_simple"
    leases = "ttl"


class TtlContinuumPolicy(FifoPolicy):
    """FIFO delivery in front of Continuum (Li et al. 2026, arXiv:2511.02230): the engine pins
    for τ* and runs program-level FCFS (lease mode ``continuum``, queue ``program``)."""

    name = "ttl_continuum"
    leases = "continuum"
    engine_queue = "program"


class TtlFixedPolicy(FifoPolicy):
    """FIFO delivery in front of Continuum's mechanism with one fixed TTL (the engine's
    ``lease_ttl_s``): the TTL sweep's arm."""

    name = "ttl_fixed"
    leases = "fixed_ttl"
    engine_queue = "program"


#: Policy name → class, the baselines first and LADS last (the order of ``bench lads``' table).
POLICIES: dict[str, Callable[[], DeliveryPolicy]] = {
    cls.name: cls for cls in (FifoPolicy, SizeFirstPolicy, CacheFirstPolicy, TailAwarePolicy,
                              TtlSimplePolicy, TtlContinuumPolicy, TtlFixedPolicy,
                              LadsNoTurnoverPolicy, LadsPolicy)
}


def make_policy(name: str) -> DeliveryPolicy:
    """A fresh policy instance by name (ValueError naming ``policy`` for an unknown one)."""
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"policy must be one of {sorted(POLICIES)}, got {name!r}") from None


__all__ = [
    "DEFAULT_EXPECTED_OUTPUT", "DEFAULT_THETA", "OUTPUT_WEIGHT", "POLICIES", "CacheFirstPolicy",
    "Choice", "DecisionView", "FifoPolicy", "LadsNoTurnoverPolicy", "LadsPolicy", "DeliveryPolicy",
    "SizeFirstPolicy", "TailAwarePolicy", "TtlContinuumPolicy", "TtlFixedPolicy",
    "TtlSimplePolicy", "cache_first", "make_policy",
]
