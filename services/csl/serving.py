"""A shard's serving lease: it serves hits only while a renewal vouched for it recently.

A library that is one of several shards may miss a record write that the writer's quorum did
not need it for. It cannot know that it missed one, and the gateway that saw the failed write
may be the one gateway that cannot reach it. So the shard itself decides whether it may serve,
from a lease: a renewal (run by any gateway, ``services/gateway/adapters/shard_repair.py``)
first asks the shard to ``begin`` — the shard notes the time on its own clock — then copies
into it every record change of enough peers, then ``grant``\\ s; the shard then serves until
``lease_s`` after the noted start. A writer whose write a shard did not acknowledge waits out
that lease before acknowledging (commit wait), so once a write is acknowledged, every shard
either holds it or has stopped serving. The argument is in ``shard_repair.py``.

Only durations on one clock are compared (the start and the expiry are both the shard's), so
clocks need bounded drift, not synchronisation. ``lease_s`` 0 turns leasing off: a library
that is the only one serves always (every write reaches it or fails).

The lease is in memory: a restarted shard (on whatever copy of its store) serves nothing until
a renewal has copied from its peers again, and its new ``incarnation`` makes every reader of its
change feed start over.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from services.common.values.errors import FailedPrecondition, InvalidArgument, quoted

#: Renewals begun and not yet granted that a shard remembers (older ones cannot be granted).
OPEN_RENEWALS = 64


@dataclass(slots=True)
class LeaseCounters:
    """What the lease did since start-up (exported as metrics)."""

    begun: int = 0
    granted: int = 0
    #: Grants refused: unknown or forgotten renewal, another incarnation, or already expired.
    refused: int = 0
    #: Times the shard stopped serving because its lease ran out before a renewal was granted.
    lapses: int = 0
    #: Serving calls (lookups, promotions, claims) answered as misses because not serving.
    unserved: int = 0


class ServingLease:
    """The serving lease of one csl process."""

    def __init__(self, lease_s: float, clock: Callable[[], float] = time.monotonic,
                 incarnation: str = "") -> None:
        if not 0 <= lease_s <= 3600:
            raise InvalidArgument("serving_lease_s", "must be in [0, 3600]")
        self.lease_s = lease_s
        self.clock = clock
        #: This process's identity: readers of the change feed key their cursors by it.
        self.incarnation = incarnation or secrets.token_hex(8)
        self.counters = LeaseCounters()
        self._until = 0.0
        self._open: OrderedDict[int, float] = OrderedDict()
        self._next = 0
        self._serving_seen = False

    @property
    def established(self) -> bool:
        """Whether a renewal was ever granted in this incarnation: then the shard holds every
        write acknowledged before that grant, and a peer's renewal may count on its feed."""
        return self.counters.granted > 0

    @property
    def leased(self) -> bool:
        """Whether serving depends on a lease (a shard) or not (a single library)."""
        return self.lease_s > 0

    def serving(self) -> bool:
        """Whether hits may be served now (check before the read, not after)."""
        if not self.leased:
            return True
        now = self.clock()
        if now < self._until:
            return True
        if self._serving_seen:
            self._serving_seen = False
            self.counters.lapses += 1
        return False

    def left_s(self) -> float:
        """Seconds of serving left (0 when not serving; ``lease_s`` 0: -1, always)."""
        if not self.leased:
            return -1.0
        return max(0.0, self._until - self.clock())

    def begin(self) -> int:
        """Start a renewal: note the time now; returns its token (grant it once the peers'
        changes are copied in)."""
        if not self.leased:
            raise FailedPrecondition("this library is not a leased shard (serving_lease_s=0)")
        self._next += 1
        self._open[self._next] = self.clock()
        while len(self._open) > OPEN_RENEWALS:
            self._open.popitem(last=False)
        self.counters.begun += 1
        return self._next

    def grant(self, incarnation: str, token: int) -> float:
        """Serve until ``lease_s`` after renewal ``token`` began; returns the seconds left.
        Raises ``FailedPrecondition`` for another incarnation's renewal, an unknown or
        forgotten one, or one whose lease would already have run out."""
        if incarnation != self.incarnation:
            self.counters.refused += 1
            raise FailedPrecondition(f"renewal of incarnation {quoted(incarnation)}, this is "
                                     f"{self.incarnation!r} (the shard restarted)")
        started = self._open.pop(token, None)
        if started is None:
            self.counters.refused += 1
            raise FailedPrecondition(f"renewal {token} unknown or already granted")
        until = started + self.lease_s
        if until <= self.clock():
            self.counters.refused += 1
            raise FailedPrecondition(f"renewal {token} took longer than the lease")
        self._until = max(self._until, until)
        self._serving_seen = True
        self.counters.granted += 1
        return self._until - self.clock()

    def refuse(self) -> None:
        """Count a serving call answered as a miss because the shard is not serving."""
        self.counters.unserved += 1


__all__ = ["OPEN_RENEWALS", "LeaseCounters", "ServingLease"]
