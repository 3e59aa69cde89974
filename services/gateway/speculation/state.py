"""State of open branches and their fills (dynbranch §3.3): the records the branch manager and
the fill runner share. Each changes only through methods of its own type: a collaborator asks
(``Branch.credit``, ``Fill.abort``, ``FillStep.stored``) instead of writing its fields."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field

from opentelemetry.context import Context

from services.common.values import clock
from services.common.values.reuse_name import ReuseName
from services.common.values.tracing import current_trace
from services.gateway.config import GatewaySettings
from services.gateway.templates import DecisionPoint, Semantics, Template

#: The gateway's settings fields: every default below is theirs (one copy of each).
_DEFAULTS = GatewaySettings.model_fields


@dataclass(frozen=True, slots=True)
class BranchSettings:
    """Knobs of the branch lifecycle."""

    #: Longest a demand waits for a branch still being opened (its fills not yet launched),
    #: and for another gateway replica's fill (whose progress this gateway cannot see).
    fill_wait_s: float = _DEFAULTS["fill_wait_s"].default
    #: An adopted fill that produced no token for this long (run's clock) is given up: the
    #: demand runs anew (``adoption``).
    adopt_stall_s: float = _DEFAULTS["adopt_stall_s"].default
    #: How often an adopting demand re-weighs waiting against running anew (run's clock); a
    #: raised fill still queued after it, while an engine could start the stage, is given up.
    adopt_check_s: float = _DEFAULTS["adopt_check_s"].default
    #: Deadline of one fill step on an engine.
    fill_timeout_s: float = _DEFAULTS["fill_timeout_s"].default
    #: Seconds an unclaimed shadow lives (independent branches keep theirs this long).
    shadow_ttl_s: float = _DEFAULTS["shadow_ttl_s"].default
    #: Seconds a branch is remembered after opening.
    branch_ttl_s: float = _DEFAULTS["branch_ttl_s"].default
    #: Open branches kept at most (older ones retire first).
    max_branches: int = _DEFAULTS["max_branches"].default


@dataclass(slots=True)
class FillStep:
    """One stage of a fill's chain."""

    stage_id: str
    name: ReuseName | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    #: A shadow is stored under ``name`` (or a confirmed entry already existed: ``confirmed``).
    ok: bool = False
    #: The library or a canonical execution answers the name (a confirmed entry existed, or
    #: the step waits on / took a canonical execution of it running on this gateway): no
    #: shadow, and demands for it go to the canonical path.
    confirmed: bool = False
    claimed: bool = False
    #: The producer identity of its shadow (``producer_id``), once stored.
    producer: str = ""
    #: Engine seconds the step cost (what its promotion saves).
    cost_s: float = 0.0
    #: A demand on this gateway is promoting the step (its library event is not news).
    claiming: bool = False
    #: The task holding the step's placeholder in the library (other replicas wait on it).
    hold: asyncio.Task[None] | None = None
    #: The engine request id of its generation ("" for a tool step, or before it started).
    request_id: str = ""
    #: When it ended (the run's clock; None while it runs).
    done_at: float | None = None
    #: When its fill planned it (the run's clock): a name confirmed since is identical work
    #: that ended while it ran.
    created_at: float = field(default_factory=clock.now)

    def finish(self) -> None:
        """The step ended (with a shadow or without): wake whoever waits for it."""
        if self.done_at is None:
            self.done_at = clock.now()
        self.done.set()

    def named_as(self, name: ReuseName) -> None:
        """The step was rendered and named as its canonical demand would be."""
        self.name = name

    def answered(self) -> None:
        """The library or a canonical execution answered the step's name: it ends with that
        result and no shadow (demands for it go to the canonical path)."""
        self.ok = self.confirmed = True
        self.finish()

    def joining(self, waiting: bool) -> None:
        """The step waits on a canonical execution of its name (closed to promotion meanwhile),
        or no longer does (that execution failed or read a record since: it runs itself)."""
        self.confirmed = waiting

    def joined(self) -> None:
        """The canonical execution it waited on answered the step: it ends without a shadow."""
        self.ok = True
        self.finish()

    def started(self, request_id: str) -> None:
        """The step's engine generation was issued under ``request_id`` (a demand may adopt it)."""
        self.request_id = request_id

    def ran(self, cost_s: float, producer: str) -> None:
        """The step ran for ``cost_s`` engine seconds; its shadow will carry ``producer``."""
        self.cost_s, self.producer = cost_s, producer

    def stored(self, ok: bool) -> None:
        """Its shadow was stored (``ok``) or refused: the step ends either way."""
        self.ok = ok
        self.finish()

    def held_by(self, task: asyncio.Task[None]) -> None:
        """The task holding the step's placeholder in the library."""
        self.hold = task

    def drop_hold(self) -> None:
        """Stop holding the step's placeholder (a no-op when none is held)."""
        if self.hold is not None:
            self.hold.cancel()

    def promoting(self, on: bool) -> None:
        """A demand on this gateway is promoting the step (its library event is not news)."""
        self.claiming = on

    def open(self, fill: Fill) -> bool:
        """Whether a demand could still be served from this step of ``fill``: not promoted,
        not ended without a shadow, and not in a fill aborted before it stored one. A step
        that found a confirmed entry is not: the library serves that name itself."""
        if self.claimed or self.confirmed:
            return False
        if self.ok:
            return True
        return not self.done.is_set() and not fill.aborted


@dataclass(slots=True)
class Fill:
    """The speculative run of one candidate's chain."""

    candidate: str
    rank: int
    steps: list[FillStep] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    cost_s: float = 0.0
    #: At least one step was promoted to answer a demand.
    consumed: bool = False
    #: Producer identities of the promoted steps' shadows (what admission credits).
    promoted: list[str] = field(default_factory=list)
    #: Aborted (a loser, not picked, or retired): a step it had not finished never will.
    aborted: bool = False

    def planned(self, step: FillStep) -> None:
        """The next step of the chain starts."""
        self.steps.append(step)

    def spent(self, cost_s: float) -> None:
        """A step of the fill ran for ``cost_s`` engine seconds."""
        self.cost_s += cost_s

    def run_as(self, task: asyncio.Task[None]) -> None:
        """The task that runs the fill's chain."""
        self.task = task

    def running(self) -> bool:
        """Whether the fill's task is still running."""
        return self.task is not None and not self.task.done()

    def abort(self) -> bool:
        """Stop the fill: no unfinished step ever stores a shadow; True when its task was still
        running (and is cancelled now)."""
        self.aborted = True
        if not self.running():
            return False
        assert self.task is not None
        self.task.cancel()
        return True

    def consume(self, step: FillStep) -> bool:
        """``step`` was promoted: it is claimed and its producer credited; True when it is the
        fill's first promoted step (the fill is consumed from now on)."""
        step.claimed = True
        self.promoted.append(step.producer)
        first, self.consumed = not self.consumed, True
        return first


@dataclass(frozen=True, slots=True)
class Settlement:
    """What settling a branch came to (``Branch.resolve``): the branch manager acts on it in
    one place (counts, discards, reports)."""

    winner: str
    #: The winner had an admitted fill.
    admitted: bool
    #: The fills stopped while they ran (losers, or unpicked fills still running).
    stopped: list[Fill]
    #: How many losing fills an exclusive branch discards (with their shadows).
    discarded: int
    #: ``Branch.final_due`` right after the settlement; None when a final report went out.
    final: tuple[bool, Fill | None] | None


@dataclass(slots=True)
class Branch:
    """One open branch of one workflow."""

    id: str
    tenant: str
    workflow_id: str
    template: Template
    point: DecisionPoint
    inputs: dict[str, str]
    outputs: dict[str, str]
    model: str
    #: Request id of the demand that opened the branch (its answer feeds ``window: user``).
    request_id: str = ""
    #: Branches of the workflow this gateway opened at the same coordinate before this one and
    #: still holds (``branch_ttl_s``; 0: the first visit); admission learns selection per visit.
    visit: int = 0
    opened_at: float = field(default_factory=clock.now)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    #: Set when the deciding stage's output is known (fills of a user window read it).
    decided: asyncio.Event = field(default_factory=asyncio.Event)
    fills: dict[str, Fill] = field(default_factory=dict)
    resolved: bool = False
    winner: str = ""
    setup_s: float = 0.0
    saved_s: float = 0.0
    #: Seconds demands waited on this branch's fills without being served (W_b, Eq. 4).
    wait_s: float = 0.0
    #: Seconds demands waited for adopted fills that then served them: the part of those
    #: fills' execution they did not hide (Eq. 4's G_s is the rest).
    adopted_wait_s: float = 0.0
    #: The predicted candidate the resolving demand selected, filled or not ("": none of them).
    selected: str = ""
    #: Reuse names of the predicted candidates' first stages (what identifies ``selected``).
    predicted: dict[str, ReuseName] = field(default_factory=dict)
    reported: bool = False
    #: Retired: no fill starts and no placeholder is held for it any more.
    retired: bool = False
    #: Demands of its workflow answered per stage since an exclusive branch resolved
    #: (``passed_by``): the k-th step of the winner's chain at a stage can serve none once more
    #: than k of them came.
    demanded: Counter[str] = field(default_factory=Counter)

    #: What became of the winner's first step when the branch resolved with an admitted
    #: winner: "promoted", or why it was not (a ``REFUSALS`` key); "" until known.
    outcome: str = ""
    #: The trace context of the demand that opened it (None untraced): its reports run in its
    #: workflow's trace whichever demand retires it.
    trace: Context | None = field(default_factory=current_trace)

    @property
    def exclusive(self) -> bool:
        """Whether one winner excludes the other candidates."""
        return self.point.semantics is Semantics.EXCLUSIVE

    def set_up(self, setup_s: float) -> None:
        """Its gates answered ``setup_s`` after it opened."""
        self.setup_s = setup_s

    def add_fill(self, fill: Fill) -> None:
        """An admitted candidate's fill runs."""
        self.fills[fill.candidate] = fill

    def decide(self, output: str) -> None:
        """The deciding stage answered ``output``: fills that read it may start."""
        self.outputs[self.point.stage] = output
        self.decided.set()

    def predict(self, candidate: str, name: ReuseName) -> None:
        """The reuse name of ``candidate``'s first stage (what identifies a selection)."""
        self.predicted[candidate] = name

    def select_predicted(self, name: ReuseName) -> None:
        """A resolving demand under ``name`` selected the predicted candidate no fill ran for
        ("" when it is none of them)."""
        self.selected = next((c for c, n in self.predicted.items() if n == name), "")

    def resolve(self, winner: str) -> Settlement:
        """The branch is settled for ``winner`` ("": none of its candidates), and its losers'
        fills stop: an exclusive branch aborts every loser's fill (their shadows are discarded),
        an independent one (Figure 1a) only the unselected fills still running (it keeps the
        finished). What that came to, for the branch manager to act on (``Settlement``)."""
        self.resolved, self.winner = True, winner
        self.selected = winner or self.selected
        losers = [fill for candidate, fill in self.fills.items() if candidate != winner]
        if not self.exclusive:
            stopped, discarded = [fill for fill in losers if fill.running() and fill.abort()], 0
        else:
            stopped, discarded = [fill for fill in losers if fill.abort()], len(losers)
        return Settlement(winner, winner in self.fills, stopped, discarded,
                          self.final_due() if not self.reported else None)

    def credit(self, fill: Fill, step: FillStep, saved_s: float, waited_s: float = 0.0) -> bool:
        """A demand was served by ``step``'s shadow, which saved ``saved_s`` engine seconds
        after the demand waited ``waited_s`` for it (the part of the fill it did not hide);
        True when ``fill`` is consumed by it first."""
        self.saved_s += saved_s
        self.adopted_wait_s += waited_s
        return fill.consume(step)

    def waited(self, seconds: float) -> None:
        """A demand waited ``seconds`` on this branch's fills without being served (W_b)."""
        self.wait_s += seconds

    def record_outcome(self, fill: Fill, step: FillStep, what: str) -> bool:
        """What became of an admitted winner's first step ("promoted" or a refusal), kept once;
        True when this call kept it (``step`` is the winner's first and none was kept yet)."""
        if (self.outcome or not self.resolved or self.winner != fill.candidate
                or not fill.steps or fill.steps[0] is not step):
            return False
        self.outcome = what
        return True

    def retire(self) -> bool:
        """No fill starts and no placeholder is held any more; True when an admitted winner's
        first stage was never seen asked for here (its outcome is "unseen")."""
        self.retired = True
        if self.resolved and self.winner in self.fills and not self.outcome:
            self.outcome = "unseen"  # its first stage was served where this gateway can't see
            return True
        return False

    def mark_reported(self, final: bool) -> bool:
        """Whether a report is due (none final yet); a final one is the last."""
        if self.reported:
            return False
        self.reported = final
        return True

    def first_stages(self) -> set[str]:
        """Stage ids that start a candidate's chain: a demand for one resolves the branch."""
        chains = [self.point.subgraph, *(c for _, c in self.point.per_candidate)]
        return {chain[0].stage for chain in chains if chain}

    def live_fills(self) -> list[Fill]:
        """The fills whose steps may still answer a demand: every fill until the branch
        resolves; then an exclusive branch keeps only its winner's (its losers are aborted and
        their shadows discarded: from the pick on they match nothing), an independent branch
        keeps all of them (a fill stopped unfinished keeps only the steps it stored)."""
        if self.resolved and self.exclusive:
            winner = self.fills.get(self.winner) if self.winner else None
            return [winner] if winner is not None else []
        return list(self.fills.values())

    def matches(self, name: ReuseName) -> list[tuple[Fill, FillStep]]:
        """Every step of a live fill whose name equals ``name`` (``live_fills``)."""
        return [(fill, step) for fill in self.live_fills() for step in fill.steps
                if step.name == name]

    def match(self, name: ReuseName) -> tuple[Fill, FillStep] | None:
        """The one live fill step whose name equals ``name``; None when none does, and when
        several do: an ambiguous match is a miss (dynbranch §3.3), never a guess."""
        found = self.matches(name)
        return found[0] if len(found) == 1 else None

    def promotable(self, name: ReuseName) -> list[tuple[Fill, FillStep]]:
        """The live fill steps under ``name`` that a demand could still be served from: not
        promoted already, not failed (ended without a shadow), not cut short by an abort, and
        not passed by the workflow (``step_open``). These, and only these, take part in the
        ambiguity rule."""
        return [(fill, step) for fill, step in self.matches(name) if self.step_open(fill, step)]

    def passed_by(self, stage_id: str) -> None:
        """A demand of the branch's workflow for ``stage_id`` was answered (served by a fill
        step or not). Counted once an exclusive branch is resolved: its winner's chain runs
        the one path the workflow now takes, so each of its steps answers the workflow's next
        demand at its stage or none. (An independent branch's fills run side by side with
        demands at the same stages, so no demand passes one of them.)"""
        if self.resolved and self.exclusive:
            self.demanded[stage_id] += 1

    def step_open(self, fill: Fill, step: FillStep) -> bool:
        """``FillStep.open``, and not passed: the workflow's demand for this step's occurrence
        of its stage has not been answered without it (a stored shadow nobody will ask for
        again is not open: the branch's final report need not wait for its retirement)."""
        if not step.open(fill):
            return False
        seen = self.demanded.get(step.stage_id, 0)
        if not seen:
            return True
        earlier = 0
        for s in fill.steps:
            if s is step:
                break
            earlier += s.stage_id == step.stage_id
        return seen <= earlier

    def outrun(self, fill: Fill) -> bool:
        """Whether the workflow's demands passed every step of ``fill``'s chain (planned or not):
        nothing it still runs can serve this workflow."""
        need = Counter(s.stage for s in self.point.chain_for(fill.candidate))
        return bool(need) and all(self.demanded.get(st, 0) >= n for st, n in need.items())

    def final_due(self) -> tuple[bool, Fill | None]:
        """Whether nothing more can change this resolved branch's outcome: every fill ended, and
        the winner's chain is promoted or can no longer be (``step_open``). A winner still
        running whose every stage the workflow passed is stopped first (``outrun``): the fill
        stopped so, else None."""
        winner = self.fills.get(self.winner)
        stopped = None
        if winner is not None and winner.running() and self.outrun(winner) and winner.abort():
            stopped = winner
        if any(f.running() for f in self.fills.values()):
            return False, stopped
        if winner is not None and any(self.step_open(winner, s) for s in winner.steps):
            return False, stopped
        return True, stopped


#: Why an admitted winner's first step was not promoted (the ``promotion_refused_*`` counters).
#: ``stalled``, ``sooner`` and ``deadline`` are the adoption rule's (``adoption``): a demand
#: that adopted a running fill and stopped waiting for it.
REFUSALS = {
    "ambiguous": "the demand matched promotable steps of more than one fill or branch",
    "stalled": "the adopted fill made no progress for adopt_stall_s: the demand ran anew",
    "sooner": "the adopted fill was still queued while an engine could start the stage at "
              "once: the demand ran anew",
    "deadline": "the demand's deadline passed while it waited for the adopted fill",
    "fill_failed": "the fill step ended without a shadow (aborted, failed or not storable)",
    "library_refused": "the library refused the promotion (stale read-set, expired or evicted)",
    "confirmed": "a confirmed library entry already held the name (served from the library)",
}


def scope_of(tenant: str, workflow_id: str) -> str:
    """The library scope of a workflow's fills: claims and settlements never cross it, so a
    shadow stays invisible to other workflows and tenants (DESIGN.md §5.2)."""
    return f"{tenant}\x1f{workflow_id}"


def producer_id(branch_id: str, candidate: str, step: int) -> str:
    """The producer identity of a fill step's shadow: what admission credits when consumed."""
    return f"fill/{branch_id}/{candidate}/{step}"


def span_attrs(branch: Branch, fill: Fill, name: ReuseName) -> dict[str, str | int]:
    """Trace attributes of one fill step."""
    return {"dynbranch.branch_id": branch.id, "dynbranch.coordinate": branch.point.coordinate,
            "dynbranch.candidate": fill.candidate, "dynbranch.rank": fill.rank,
            "dynbranch.reuse_name": str(name)}


__all__ = ["REFUSALS", "Branch", "BranchSettings", "Fill", "FillStep", "Settlement",
           "producer_id", "scope_of", "span_attrs"]
