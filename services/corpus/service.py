"""The corpus for an event loop, shared by every gateway of a mesh (DESIGN.md §5.3).

Why one corpus service: a gateway that opens the corpus itself keeps its own in-memory index,
and a second gateway over the same LMDB folder answers from an index that is behind the store
the first one wrote (stale text, or a search that finds the store disagreeing with its index).
In Kubernetes the gateways are separate pods, and LMDB must not be shared over a network
filesystem, so one process holds the corpus and its index (``python -m services.corpus``) and
every gateway searches and writes through it (``client.CorpusClient``; an in-process gateway uses
this object itself: both are the gateway's ``CorpusPort``). A shared store that each gateway
follows through a change feed would keep searches local, but it would still need one writer to
order writes and their csl handshake, and a gateway's index would trail an acknowledged write
unless every write waited for every follower; with one index a write is in every gateway's next
search as soon as it is acknowledged, and no gateway can be behind.

Reads (search, confirm, get, versions, titles) run on worker threads (the loop's default
executor, which a virtual-clock replay makes inline), under the corpus's own lock: no LMDB work
on the loop.

Writes. The freshness argument of ``core.py`` needs the csl to hand out a write's versions before
the corpus applies it: the csl invalidates the old readers first, and a search in between reads
old text at old versions, which the csl already holds stale. With several gateways writing,
one write's plan (which records it bumps), its csl versions and its commit must not interleave
with another's, or the plan is stale at the commit. So a write takes the corpus's *write turn*:
``begin_write`` plans it and returns a ticket naming the records with their current versions (the
csl's floors); the writer gets the versions from the csl and ``commit``s them, or ``abort``s.
One ticket holds the turn at a time; other writers wait for it, each up to its own deadline. A
ticket whose holder went away (a gateway killed between the csl and the commit) lapses after
``lease_s`` and frees the turn; its commit is then refused (``FailedPrecondition``): nothing of it
reached the corpus, and the csl's bumps only invalidated readers (the safe direction). A
reconcile with a csl that lost writes (``records_above``, ``adopt_versions``) takes the same turn.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, TypeVar

from services.common.values.errors import DeadlineExceeded, FailedPrecondition, Unavailable, quoted
from services.corpus.codec import (
    CorpusInfo,
    Document,
    Hit,
    RecordVersion,
    SearchResult,
    TitlePage,
    WritePlan,
)
from services.corpus.core import Corpus

log = logging.getLogger(__name__)
T = TypeVar("T")
#: How long a write ticket holds the turn without a commit or abort before it lapses (s).
LEASE_S = 10.0
#: How long a writer waits for the turn when it names no deadline of its own (s).
TURN_WAIT_S = 10.0


@dataclass(slots=True)
class _Ticket:
    id: str
    kind: str  # "write" or "reconcile"
    record_ids: tuple[str, ...]
    upserts: tuple[Document, ...] = ()
    removals: tuple[str, ...] = ()
    lapse: asyncio.TimerHandle | None = None


class CorpusService:
    """One ``Corpus`` for one event loop: reads on worker threads, writes one turn at a time."""

    def __init__(self, corpus: Corpus, *, lease_s: float = LEASE_S,
                 executor: Executor | None = None) -> None:
        self.corpus = corpus
        self.lease_s = lease_s
        self._executor = executor  # None: the loop's default executor
        self._busy = False
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._ticket: _Ticket | None = None
        self._pending: set[asyncio.Future[Any]] = set()
        self._closed = False
        #: searches, writes, reconciles, aborts, lapses (tickets that timed out), waits (writers
        #: that queued for the turn), turn_timeouts (writers whose deadline passed in the queue).
        self.counters: Counter[str] = Counter()

    # -- identity -------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The corpus name (record ids are ``corpus/<name>/...``)."""
        return self.corpus.name

    @property
    def identity(self) -> str:
        """``name@incarnation`` (``Corpus.identity``)."""
        return self.corpus.identity

    async def info(self) -> CorpusInfo:
        """Name, identity, size and write sequence (in memory: no thread hop)."""
        return CorpusInfo(self.corpus.name, self.corpus.identity, len(self.corpus),
                          self.corpus.write_seq)

    # -- reads ----------------------------------------------------------------------------------

    async def search(self, query: str, k: int) -> SearchResult:
        """``Corpus.search``: the top ``k`` and the exact read-set."""
        self.counters["searches"] += 1
        return await self._run(self.corpus.search, query, k)

    async def confirm(self, hits: Sequence[Hit]) -> bool:
        """``Corpus.confirm``: every hit still stored at its version with its text."""
        return await self._run(self.corpus.confirm, tuple(hits))

    async def get(self, doc_id: str) -> tuple[Document, int] | None:
        """A stored document and its version, or None."""
        return await self._run(self.corpus.get, doc_id)

    async def versions_of(self, record_ids: Sequence[str]) -> list[int]:
        """The current versions of ``record_ids``, in order (0: never written)."""
        return await self._run(self.corpus.versions_of, tuple(record_ids))

    async def titles(self, after: str = "", limit: int = 1024) -> TitlePage:
        """One page of ``(doc id, version, title)`` after ``after``, in id order."""
        titles, more = await self._run(self.corpus.titles, after, limit)
        return TitlePage(tuple(titles), more)

    # -- writes -----------------------------------------------------------------------------------

    async def begin_write(self, upserts: Sequence[Document] = (), removals: Sequence[str] = (),
                          wait_s: float = TURN_WAIT_S) -> WritePlan:
        """Take the write turn (waiting up to ``wait_s``) and plan the write: its ticket, the
        records it bumps and their current versions. A bad write is refused, turn released."""
        upserts, removals = tuple(upserts), tuple(removals)
        await self._take_turn(wait_s)
        ids, floors = await self._holding_turn(self._plan, upserts, removals)
        return self._issue(_Ticket("", "write", ids, upserts, removals), floors)

    async def begin_reconcile(self, write_seq: int, wait_s: float = TURN_WAIT_S) -> WritePlan:
        """Take the write turn and list the records above a csl's ``write_seq`` (which it lost);
        commit the csl's new versions of them. Nothing above it: an empty plan, turn released."""
        await self._take_turn(wait_s)
        above = await self._holding_turn(self.corpus.records_above, write_seq)
        if not above:
            self._release()
            return WritePlan("", (), ())
        return self._issue(_Ticket("", "reconcile", tuple(r.record_id for r in above)),
                           [r.version for r in above])

    async def commit(self, ticket: str, versions: Mapping[str, int]
                     ) -> tuple[RecordVersion, ...]:
        """Apply the ticket's write (or reconcile) at the csl's ``versions`` (exactly the
        planned records, each above its current version); every bumped record and its version.
        The turn passes on once the commit is on disk, even when the caller gives up first."""
        held = self._claim(ticket)
        versions = dict(versions)
        if held.kind == "write":
            written: tuple[RecordVersion, ...] = await self._holding_turn(
                self.corpus.write_documents, held.upserts, held.removals, versions, final=True)
            self.counters["writes"] += 1
            return written
        planned = set(held.record_ids)
        if set(versions) != planned:
            self._release()
            raise FailedPrecondition("versions must name exactly the ticket's records (missing "
                                     f"{sorted(planned - set(versions))[:3]}, unexpected "
                                     f"{sorted(set(versions) - planned)[:3]})")
        await self._holding_turn(self.corpus.adopt_versions, versions, final=True)
        self.counters["reconciles"] += 1
        return tuple(RecordVersion(r, versions[r]) for r in held.record_ids)

    async def abort(self, ticket: str) -> bool:
        """Give the turn back without writing; False when ``ticket`` holds no turn (any more)."""
        if self._ticket is None or self._ticket.id != ticket or not ticket:
            return False
        self.counters["aborts"] += 1
        self._release()
        return True

    def _plan(self, upserts: Sequence[Document], removals: Sequence[str]
              ) -> tuple[tuple[str, ...], list[int]]:
        """The records a write bumps and their current versions (one thread hop)."""
        ids = self.corpus.plan_write(upserts, removals)
        return ids, self.corpus.versions_of(ids)

    # -- the write turn ---------------------------------------------------------------------------

    async def _take_turn(self, wait_s: float) -> None:
        if self._closed:
            raise Unavailable(f"corpus {self.name!r} is closing")
        if not self._busy:
            self._busy = True
            return
        loop = asyncio.get_running_loop()
        turn: asyncio.Future[None] = loop.create_future()
        self._waiters.append(turn)
        self.counters["waits"] += 1
        timer = loop.call_later(max(wait_s, 0.0), _fail, turn, DeadlineExceeded(
            f"corpus {self.name!r}: another write held the write turn for the whole "
            f"{wait_s:.1f} s wait; nothing was written"))
        try:
            await turn
        except BaseException:
            handed = turn.done() and not turn.cancelled() and turn.exception() is None
            if handed:
                self._release()  # handed the turn, then cancelled before using it
            else:
                if turn in self._waiters:
                    self._waiters.remove(turn)
                if turn.done() and not turn.cancelled():
                    self.counters["turn_timeouts"] += 1
            raise
        finally:
            timer.cancel()

    def _issue(self, ticket: _Ticket, floors: Sequence[int]) -> WritePlan:
        ticket.id = secrets.token_hex(8)
        ticket.lapse = asyncio.get_running_loop().call_later(self.lease_s, self._lapse,
                                                              ticket.id)
        self._ticket = ticket
        return WritePlan(ticket.id, ticket.record_ids, tuple(floors))

    def _lapse(self, ticket: str) -> None:
        if self._ticket is not None and self._ticket.id == ticket:
            self.counters["lapses"] += 1
            log.warning("corpus %s: write ticket %s lapsed after %.1f s without a commit; the "
                        "write turn passes on", self.name, ticket, self.lease_s)
            self._release()

    def _claim(self, ticket: str) -> _Ticket:
        """The ticket holding the turn, now committing (its lapse cancelled; the turn stays)."""
        held = self._ticket
        if held is None or held.id != ticket or not ticket:
            raise FailedPrecondition(
                f"write ticket {quoted(ticket)} holds no write turn of corpus {self.name!r} (it "
                f"lapsed after {self.lease_s:.1f} s, was aborted or committed): nothing of it "
                "was written; write again")
        if held.lapse is not None:
            held.lapse.cancel()
        self._ticket = None
        return held

    def _release(self) -> None:
        """End the current turn: hand it to the next waiter, else free it."""
        if self._ticket is not None and self._ticket.lapse is not None:
            self._ticket.lapse.cancel()
        self._ticket = None
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._busy = False

    async def _holding_turn(self, fn: Callable[..., T], *args: Any, final: bool = False) -> T:
        """Run turn work on a thread. It ends the turn when it fails (or, ``final``, when it is
        done), and only once the thread is done, even when the caller is cancelled first."""
        future = self._submit(fn, *args)
        try:
            result = await asyncio.shield(future)
        except BaseException:
            future.add_done_callback(lambda _f: self._release())
            raise
        if final:
            self._release()
        return result

    # -- threads and lifecycle --------------------------------------------------------------------

    def _submit(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        if self._closed:
            raise Unavailable(f"corpus {self.name!r} is closing")
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._executor, functools.partial(fn, *args))
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        return future

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.shield(self._submit(fn, *args))

    async def close(self) -> None:
        """Refuse new work, fail queued writers, wait for running threads, close LMDB."""
        if self._closed:
            return
        self._closed = True
        for waiter in self._waiters:
            _fail(waiter, Unavailable(f"corpus {self.name!r} is closing"))
        self._waiters.clear()
        if self._ticket is not None and self._ticket.lapse is not None:
            self._ticket.lapse.cancel()
        await asyncio.gather(*list(self._pending), return_exceptions=True)
        self.corpus.close()


def _fail(future: asyncio.Future[None], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


__all__ = ["LEASE_S", "TURN_WAIT_S", "CorpusService"]
