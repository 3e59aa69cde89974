"""The lease provider's values: settings, the sender's descriptor, pending results, counters.

Plain Python (``provider.py`` holds the policy and ``book.py`` the bookkeeping;
STYLE.md §1).
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, get_args

from services.common.values.errors import InvalidArgument
from services.common.values.leases import LeaseRecord, LeaseState, ResultKey
from services.engine_agent.leases.port import ResidentPrefix

#: Token ids of a history, as the engine tokenizes it: the embedded engines answer at once, a
#: remote server (``/tokenize``) asynchronously.
Tokenize = Callable[[str], list[int] | Awaitable[list[int]]]


async def token_ids(tokenize: Tokenize, text: str) -> tuple[int, ...]:
    """``tokenize(text)`` as a tuple, awaited when the tokenizer is asynchronous."""
    ids = tokenize(text)
    if inspect.isawaitable(ids):
        ids = await ids
    return tuple(ids)


@dataclass(frozen=True, slots=True)
class LeaseModeSpec:
    """What one lease mode does: every switch over the modes reads one of these flags."""

    #: One clause for the ``lease_mode`` setting's description.
    summary: str
    #: Budgeted leases: granted, revoked and replenished by the periodic evaluation against
    #: B(t) (LADS §3.4-3.7), evaluated at once when a result is ready.
    budgeted: bool = False
    #: A lease at tool start for the tool's mean duration, when that is short (the simplified
    #: TTL pin).
    expected_ttl: bool = False
    #: Continuum's pin at the call's finish, without a budget, released under memory pressure.
    pins: bool = False
    #: The pin's TTL is τ* of ``continuum.optimal_ttl`` (else the fixed ``ttl_s``).
    optimal_ttl: bool = False


#: Lease mode → what it does; the one table of the modes (``lads``: budgeted FIFO prefix leases;
#: ``ttl``: the simplified TTL pin, at tool start, for the tool's mean duration when it is
#: under 2 s; ``continuum``: Continuum's pins with the TTL τ*; ``fixed_ttl``: the same pins with
#: one fixed TTL, ``ttl_s``; ``none``: the readiness lookup only).
LEASE_MODE_SPECS: dict[str, LeaseModeSpec] = {
    "lads": LeaseModeSpec("budgeted FIFO prefix leases", budgeted=True),
    "ttl": LeaseModeSpec("the simplified TTL pin", expected_ttl=True),
    "continuum": LeaseModeSpec("Continuum's τ* pins (with queue_policy program)", pins=True,
                               optimal_ttl=True),
    "fixed_ttl": LeaseModeSpec("the same pins for lease_ttl_s", pins=True),
    "none": LeaseModeSpec("cache hints only"),
}
#: The lease modes, in the table's order.
LEASE_MODES: tuple[str, ...] = tuple(LEASE_MODE_SPECS)
#: The modes as a type, for the settings and type checkers (checked against the table below).
LeaseMode = Literal["lads", "ttl", "continuum", "fixed_ttl", "none"]
assert get_args(LeaseMode) == LEASE_MODES, "LeaseMode lists the keys of LEASE_MODE_SPECS"


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    """The provider's parameters (LADS §5.1 defaults: ℓ = 8 s, H = 2,048 blocks, 100 ms)."""

    mode: LeaseMode = "lads"
    lifetime_s: float = 8.0
    headroom_blocks: int = 2048
    interval_s: float = 0.1
    ttl_max_expected_s: float = 2.0
    ttl_alpha: float = 0.5
    ttl_s: float = 2.0  # the pin of ``fixed_ttl`` (Continuum's code pins for 2 s)
    ttl_max_s: float = 60.0  # the longest τ* ``continuum`` may choose
    #: ``lads`` with B(t) = the whole pool: a reference for the budget rule, not a policy
    unbudgeted: bool = False
    max_pending_s: float = 600.0  # forget a result nobody delivered or withdrew after this

    def __post_init__(self) -> None:
        if self.mode not in LEASE_MODES:
            raise InvalidArgument("lease_mode", f"must be one of {', '.join(LEASE_MODES)}, "
                                                f"got {self.mode!r}")
        for name in ("lifetime_s", "interval_s", "ttl_max_expected_s", "ttl_s", "ttl_max_s",
                     "max_pending_s"):
            if getattr(self, name) <= 0:
                raise InvalidArgument(name, "must be positive")
        if self.headroom_blocks < 0:
            raise InvalidArgument("headroom_blocks", "must be >= 0")

    @property
    def spec(self) -> LeaseModeSpec:
        """What the mode does (its row of ``LEASE_MODE_SPECS``)."""
        return LEASE_MODE_SPECS[self.mode]


@dataclass(frozen=True, slots=True)
class Descriptor:
    """What the sender learns at readiness: the cache hint and the lease, if one was granted."""

    key: ResultKey
    resident_blocks: int
    resident_tokens: int
    prefix_digest: str
    lease: LeaseRecord | None


@dataclass(slots=True)
class Lease:
    lease_id: str
    blocks: frozenset[int]
    order: tuple[int, ...]
    granted_at: float  # g_i: the first grant; never moves
    deadline: float
    state: LeaseState = LeaseState.ACTIVE
    sequence: int = 0


@dataclass(slots=True)
class Pending:
    key: ResultKey
    ready_at: float
    seq: int  # arrival order: the version tie-break of "ready-time, identity and version order"
    token_ids: tuple[int, ...]
    payload_digest: str
    prefix: ResidentPrefix
    cold: bool
    lease: Lease | None = None
    request_id: str | None = None  # bound at complete receipt
    allocated: bool = False  # the continuation got its first allocation

    @property
    def held(self) -> bool:
        return self.lease is not None and self.lease.state is LeaseState.ACTIVE


@dataclass(slots=True)
class LeaseStats:
    """Counters of one provider (the bench and the invariant tests read them)."""

    grants: int = 0
    regrants: int = 0
    expiries: int = 0
    handoffs: int = 0
    handoffs_at_bind: int = 0  # of ``handoffs``: leases whose request was allocated already
    handoffs_unowned: int = 0
    revocations: int = 0
    denials: int = 0
    added_refs: int = 0
    released_refs: int = 0
    protection_block_s: float = 0.0
    grants_over_target: int = 0  # grants after which U(t) > B(t): must stay 0
    cpu_s: float = 0.0
    evaluations: int = 0
    pin_decisions: int = 0  # continuum / fixed_ttl: calls whose TTL was decided
    pinned_ttl_s: float = 0.0  # ... the sum of the TTLs they pinned for (0 for no pin)
    pins_reused: int = 0  # ... pins still held when their continuation arrived


@dataclass(slots=True)
class Tick:
    at: float = 0.0
    protected: int = 0
    denied: list[ResultKey] = field(default_factory=list)


class ToolTimes:
    """Per-tool moving averages of tool durations (the TTL of Continuum's pins, arXiv:2511.02230).

    A call's duration runs from its start to its result's readiness; the average is exponential
    with weight ``alpha``. At most ``max_calls`` started calls are remembered.
    """

    def __init__(self, alpha: float, max_calls: int = 65_536) -> None:
        self.alpha, self.max_calls = alpha, max_calls
        self._mean: dict[str, float] = {}
        self._started: OrderedDict[ResultKey, tuple[str, float]] = OrderedDict()

    def started(self, key: ResultKey, tool: str, at: float) -> None:
        """A call of ``tool`` began."""
        self._started[key] = (tool, at)
        while len(self._started) > self.max_calls:
            self._started.popitem(last=False)

    def finished(self, key: ResultKey, at: float) -> None:
        """Its result is ready: fold the call's duration into its tool's average."""
        started = self._started.pop(key, None)
        if started is None:
            return
        tool, began = started
        old = self._mean.get(tool)
        seconds = at - began
        self._mean[tool] = seconds if old is None else self.alpha * seconds + (1 - self.alpha) * old

    def expected(self, tool: str) -> float | None:
        """The tool's average duration; None before its first call finished."""
        return self._mean.get(tool)

    def forget(self, key: ResultKey) -> None:
        """Drop a started call that will never finish here."""
        self._started.pop(key, None)


__all__ = ["LEASE_MODES", "LEASE_MODE_SPECS", "Descriptor", "Lease", "LeaseMode", "LeaseModeSpec",
           "LeaseSettings", "LeaseStats", "Pending", "Tick", "Tokenize", "ToolTimes", "token_ids"]
