"""Freshness over N library shards and M gateways under any partition: serving leases renewed
from the peers, and commit wait (DESIGN.md §5.3).

The protocol (``q = N // 2 + 1``):

* **Writes** go to every shard under one version ``v`` the writer picks, above every write
  sequence it has seen; a shard applies it only if ``v`` is above its own write sequence, else
  refuses and answers its sequence, and the writer tries again above it. A write is
  *acknowledged* (returned to its caller) once a quorum of ``q`` shards applied it, and then
  either every shard applied it or ``commit_wait_s`` has passed since the quorum's last
  acknowledgement arrived (``WriteTally``). So one version names one write everywhere: a shard
  never applies two writes at one version, two acknowledged writes at one version would need
  two quorums that do not meet, and a write that begins after another was acknowledged gets a
  higher version (its quorum meets the other's in a shard that refuses anything lower). That is
  what lets a shard take a peer's higher version as the write it lacks (numbering writes per
  shard could give two writes one number on two shards).
* **Serving.** A shard (``services/csl/serving.py``) serves hits (lookups, promotions, claims)
  only while it holds a serving lease, and checks it before each read. Any gateway may renew
  it (``renew``): (1) ``BeginRenewal`` — the shard notes the time ``b`` on its own clock;
  (2) from every peer it can reach, copy each record change the peer made since this cursor
  (``Changes``, a feed in change order) into the shard (``AdoptVersions``: versions only move
  up, readers of a raised record are invalidated as the write would have), until the peer's
  feed is drained; (3) ``GrantServing`` — the shard serves until ``b + lease_s`` on its clock —
  if enough peers were drained: for the first grant of a shard's incarnation ``N - q + 1``
  peers, whatever their state (``first_vouchers``); after that ``N - q`` peers that are
  themselves *established* (granted at least once in their own incarnation;
  ``steady_vouchers``). Before a shard's first grant in an incarnation the renewal adopts the
  *served mark* into it (``SERVED_MARK``, a record no stage reads, version 1), so a store that
  has ever served holds at least one record, and so does every later copy of it.
* **Founding** (``found``): a new mesh whose shards are partly down at start-up. No shard can
  have its first grant while fewer than ``N - q + 1`` peers answer (with three shards: all of
  them), so a renewal round in which fewer than ``q`` shards serve also tries to found: it
  begins a renewal on every shard, then checks that at least ``q`` answered and that every one
  that answered is *new* — not established, and holding no record at all (an empty change
  feed: no write, no adoption, no served mark) — then adopts the served mark into each and
  grants each. The shards that were down join later by the first-grant rule.

**Claim:** once a write W is acknowledged, no shard serves an entry that read a record W wrote
at an older version. Let Q be the ``q`` shards whose application of W the writer counted, all
done by ``t_q``. A shard in Q invalidated W's readers when it applied it. Take a shard S that
serves a hit whose lease it checked at ``t_c``, after the acknowledgement. If S did not apply W,
the writer waited, so ``t_c >= t_q + commit_wait_s``; ``commit_wait_s`` is ``lease_s`` stretched
by the clocks' worst rate difference, so S's lease at ``t_c`` comes from a renewal that began at
``b > t_q``, and S adopted everything that renewal drained before it was granted, before
``t_c``, before the read. What it drained holds W if a drained peer P in Q held W when its
feed was read (after ``b``, and a feed lists every change it holds in change order; a peer in
a new incarnation is read from its beginning). Such a P exists:

* a steady grant drained ``N - q`` established peers among S's ``N - 1``, and Q holds ``q`` of
  those ``N - 1`` (S is not in Q), so one drained established peer P is in Q (``N - q + q >
  N - 1``). P applied W by ``t_q``; if it restarted since (on any copy of its store), it was
  established again only by a first grant of its new incarnation, which (next point) copied W
  back in before the grant, so before its feed said established.
* a first grant drained ``N - q + 1`` peers of any state among ``N - 1``, of which Q holds at
  least ``q - 1`` (``q`` if S is not in Q; S may be in Q and have lost W in a restart on an
  older copy): so at least one drained peer is in Q, two if S is not in Q — and one restarted
  copy that lost W among them (one fault) still leaves one holding W.
* a founding grant copies nothing, and needs none: the ``q`` or more new shards that answered
  and Q (``q`` of ``N``) meet in a shard that held no record after ``b`` (every check came after
  every renewal began), yet applied W (by ``t_q < b``, or, if it is S itself, before it
  restarted). A shard takes numbered writes only once granted, so it held the served mark
  before W, and it lost both: it was restarted on a copy of its store from before it first
  served — the case given up below.

So it holds under any partition (a cut-off shard stops serving within ``lease_s`` unless some
gateway still reaches it and enough of its peers), message loss and duplication (adoption is an
idempotent max; a grant is once per token), restarts, and one shard at a time restarted on an
older copy of its store (until that shard's first grant). It assumes clocks whose rates differ
by at most ``DRIFT`` (durations only: no two clocks are compared). One case it gives up, for
founding only: a shard restarted on a copy from before it first served (a lost volume replaced
by an empty one) while ``q - 1`` other reachable shards have never served either (down since
the mesh began) and every shard holding the mesh's writes is out of reach. No rule can tell
that from a new mesh (the only copies of a write are lost or unreachable, and the shards that
answer look exactly as at start-up), so a mesh that may start from a quorum accepts it; every
other start-up and every shard that has served once keeps the guarantee in full. One down shard
of three, at start-up or later, leaves the other two serving.

What it costs: a hit costs nothing extra (the lease is checked in memory at the shard); a write
that reaches every shard costs nothing extra; a write some shard did not acknowledge waits
``commit_wait_s`` (just over ``lease_s``); each gateway renews each shard every
``renew_interval_s`` (one page from every peer, empty when nothing changed); a shard no gateway
can renew serves nothing (a miss, never a stale hit); a first grant adopts the served mark (one
call), and a round with fewer than ``q`` shards serving tries to found (a renewal begun and one
page read per shard, nothing granted unless all are new). Writes of two gateways that overlap in
time cost a refusal and a second fan-out (one round trip more) for one of them; and an
attempt refused by too many shards may leave its version applied on a few, above the version
its retry settles on, which makes the record miss on every shard until its next write (a lost
hit, not a wrong one).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import grpc

from services.common.values.reads import RecordKey
from services.csl.client import CslClient

#: Records per Changes page (AdoptVersions takes at most 4,096).
PAGE = 2048
#: Adopted into a shard before its first grant in an incarnation: a store that ever served holds
#: a record (no stage reads it; version 1, below any write a granted shard could take after it).
SERVED_MARK: tuple[RecordKey, int] = (("", "dynbranch/csl-shard-served"), 1)
#: Worst relative rate difference between two hosts' monotonic clocks assumed (NTP-disciplined
#: clocks drift by parts per million; 1% is far beyond that).
DRIFT = 0.01
T = TypeVar("T")


def quorum(shards: int) -> int:
    """Acknowledgements a write needs: a majority of the shards."""
    return shards // 2 + 1


def first_vouchers(shards: int) -> int:
    """Peers, of any state, the first renewal of a shard's incarnation must drain (all of them
    when there are fewer: one shard alone has no copy to recover from)."""
    return min(shards - quorum(shards) + 1, shards - 1)


def steady_vouchers(shards: int) -> int:
    """Established peers a later renewal must drain (it meets every quorum in one)."""
    return shards - quorum(shards)


def commit_wait_s(lease_s: float, drift: float = DRIFT) -> float:
    """How long a write some shard did not acknowledge waits after its quorum: ``lease_s`` on
    the shard's clock, measured on the writer's."""
    return lease_s * (1 + drift) / (1 - drift)


class Cursors:
    """Where each renewal of a shard left off in each peer's change feed, per incarnation of
    the shard (what it adopted is durable in that incarnation) and of the peer (its stamps)."""

    def __init__(self) -> None:
        self._at: dict[tuple[str, str], tuple[str, int]] = {}

    def start(self, shard: str, peer: str) -> tuple[str, int]:
        """``(peer incarnation, stamp)`` to copy from (``("", 0)``: from the beginning)."""
        return self._at.get((shard, peer), ("", 0))

    def advance(self, shard: str, peer: str, incarnation: str, stamp: int) -> None:
        """Everything of ``peer`` up to ``stamp`` is in ``shard``."""
        self._at[(shard, peer)] = (incarnation, stamp)

    def forget(self, shard: str) -> None:
        """Drop the cursors of an incarnation of ``shard`` that is gone."""
        for key in [k for k in self._at if k[0] == shard]:
            del self._at[key]


@dataclass(slots=True, frozen=True)
class Renewal:
    """What one renewal of a shard did."""

    incarnation: str
    lease_s: float
    #: Peers whose change feed was drained into the shard, and how many of them established.
    drained: int
    established: int
    invalidated: int
    #: Seconds of serving the grant gave (None: not granted, too few peers drained).
    serving_s: float | None


@dataclass(slots=True, frozen=True)
class Drained:
    """One peer's feed copied into the shard."""

    invalidated: int
    #: Whether the peer was established when its last page was read.
    established: bool


async def copy_changes(shard: CslClient, shard_incarnation: str, peer: CslClient,
                       cursors: Cursors, deadline_s: float) -> Drained:
    """Drain ``peer``'s change feed since the cursor into ``shard``. A peer that restarted
    (another incarnation) is copied from the beginning. Raises the first RPC error (the cursor
    keeps what was copied)."""
    expected, after = cursors.start(shard_incarnation, peer.target)
    invalidated, more, established = 0, True, False
    while more:
        page = await peer.changes(after, deadline_s, limit=PAGE)
        if expected and page.incarnation != expected:  # its stamps restarted: copy it all again
            expected, after = page.incarnation, 0
            continue
        expected, more, established = page.incarnation, page.more, page.established
        versions = [((v.tenant, v.record_id), v.version) for v in page.versions]
        if versions:
            invalidated += await shard.adopt_versions(versions, deadline_s)
        after = page.next
        cursors.advance(shard_incarnation, peer.target, page.incarnation, page.next)
    return Drained(invalidated, established)


async def renew(shard: CslClient, peers: Sequence[CslClient], cursors: Cursors,
                deadline_s: float) -> Renewal:
    """Renew ``shard``'s serving lease from ``peers`` (every other shard): granted when enough
    of them were drained after the renewal began (``first_vouchers`` / ``steady_vouchers``).
    Raises an RPC error of the shard itself; a peer's error only leaves that peer out."""
    begun = await shard.begin_renewal(deadline_s)
    copies = await asyncio.gather(*(copy_changes(shard, begun.incarnation, p, cursors,
                                                 deadline_s) for p in peers),
                                  return_exceptions=True)
    for outcome in copies:
        if isinstance(outcome, BaseException) and not isinstance(outcome, grpc.aio.AioRpcError):
            raise outcome
    drained = [c for c in copies if isinstance(c, Drained)]
    established = sum(d.established for d in drained)
    shards = len(peers) + 1
    enough = (established >= steady_vouchers(shards) if begun.established
              else len(drained) >= first_vouchers(shards))
    serving_s = None
    if enough:
        if not begun.established:
            await shard.adopt_versions([SERVED_MARK], deadline_s)
        serving_s = await shard.grant_serving(begun.incarnation, begun.token, len(drained),
                                              deadline_s)
    return Renewal(begun.incarnation, begun.serving_lease_s, len(drained), established,
                   sum(d.invalidated for d in drained), serving_s)


async def holds_nothing(shard: CslClient, deadline_s: float) -> bool:
    """Whether ``shard`` holds no record at all: its change feed is empty from the start."""
    page = await shard.changes(0, deadline_s, limit=1)
    return not page.versions and not page.more and page.next == 0


async def found(shards: Sequence[CslClient], deadline_s: float) -> int:
    """Found a new mesh from the shards that answer (module docstring, **Founding**): when at
    least a quorum of all ``shards`` answered and every one that answered is new (never granted
    in its incarnation, holding no record), adopt the served mark into each and grant each.
    Returns how many were granted (0: nothing to found here). Raises no RPC error: a shard that
    does not answer is left out (and a check that fails founds nothing)."""
    begun = await _each([s.begin_renewal(deadline_s) for s in shards])
    answered = [(s, b) for s, b in zip(shards, begun, strict=True) if b is not None]
    if len(answered) < quorum(len(shards)) or any(b.established for _, b in answered):
        return 0
    empty = await _each([holds_nothing(s, deadline_s) for s, _ in answered])
    if not all(e is True for e in empty):
        return 0
    marked = await _each([s.adopt_versions([SERVED_MARK], deadline_s) for s, _ in answered])
    granted = await _each([s.grant_serving(b.incarnation, b.token, len(answered) - 1, deadline_s)
                           for (s, b), m in zip(answered, marked, strict=True) if m is not None])
    return sum(g is not None for g in granted)


async def _each(calls: Sequence[Awaitable[T]]) -> list[T | None]:
    """Every call's result, None for one that failed with an RPC error (others raise)."""
    out: list[T | None] = []
    for result in await asyncio.gather(*calls, return_exceptions=True):
        if isinstance(result, BaseException):
            if not isinstance(result, grpc.aio.AioRpcError):
                raise result
            out.append(None)
        else:
            out.append(result)
    return out


class WriteTally:
    """When a write fanned out to every shard may be acknowledged: a quorum applied it, and the
    others did too or ``wait_s`` passed since the quorum was reached."""

    def __init__(self, shards: int, wait_s: float) -> None:
        self.shards = shards
        self.quorum = quorum(shards)
        self.wait_s = wait_s
        self.acked = 0
        self.failed = 0
        #: When the quorum was reached (None: not yet).
        self.quorum_at: float | None = None

    def ack(self, now: float) -> None:
        """One shard applied the write."""
        self.acked += 1
        if self.acked == self.quorum:
            self.quorum_at = now

    def fail(self) -> None:
        """One shard did not (an error, or its answer was not usable)."""
        self.failed += 1

    def lost(self) -> bool:
        """A quorum can no longer be reached."""
        return self.shards - self.failed < self.quorum

    def done_at(self) -> float | None:
        """When the write may be acknowledged (None: not yet known); every shard answered ok:
        at once."""
        if self.quorum_at is None:
            return None
        if self.acked == self.shards:
            return self.quorum_at
        return self.quorum_at + self.wait_s

    def waited(self) -> bool:
        """Whether acknowledging needs the commit wait (some shard did not apply it)."""
        return self.quorum_at is not None and self.acked < self.shards


__all__ = ["DRIFT", "PAGE", "SERVED_MARK", "Cursors", "Drained", "Renewal", "WriteTally",
           "commit_wait_s", "copy_changes", "first_vouchers", "found", "holds_nothing", "quorum",
           "renew", "steady_vouchers"]
