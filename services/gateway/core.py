"""The gateway's composition root, protocol-free: demands in, answers out; templates, writes and
branch settlements. The gRPC servicer and the OpenAI-compatible HTTP front call only this
object's methods.

One demand flows one way: the edge resolves its stage into the ``Demand`` (``stage``),
``call`` checks it and hands it to the demand path (``stages.StageService``), which calls
speculation once and the library and engines below it. Nothing below calls up into the core:
the core reads what it must act on (a served result refused as stale, a library that came back
from a restart) from counters after each demand and write, and schedules a reconcile then."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from services.common.values.errors import InvalidArgument, PayloadTooLarge, ResourceExhausted
from services.common.values.reads import MAX_WRITE_RECORDS
from services.common.values.tracing import untraced
from services.corpus import Document
from services.gateway.config import GatewaySettings
from services.gateway.ports import AppliedWrite, EnginePort, LibraryPort
from services.gateway.reuse.naming import Naming
from services.gateway.speculation.branches import BranchManager
from services.gateway.stages import StageService
from services.gateway.templates import (
    DecisionPoint,
    Stage,
    StageKind,
    Template,
    TemplateRegistry,
    parse_template_yaml,
)
from services.gateway.tools.base import RecordVersion
from services.gateway.tools.corpus_port import CorpusPort
from services.gateway.values import Answer, Demand, TextStream, unknown_model

log = logging.getLogger(__name__)

#: Records per library write while reconciling (the csl takes at most 4,096 per request).
RECONCILE_BATCH = 1024
#: Longest wait between background reconcile attempts while the library is unreachable.
RECONCILE_RETRY_MAX_S = 10.0


#: The gateway's settings fields: the limits' defaults are theirs (one copy of each).
_DEFAULTS = GatewaySettings.model_fields


@dataclass(frozen=True, slots=True)
class Limits:
    """Input bounds enforced on every demand."""

    max_prompt_bytes: int = _DEFAULTS["max_prompt_bytes"].default
    max_request_id: int = _DEFAULTS["max_request_id"].default
    max_map_entries: int = 256
    #: Demands answered at once; one more is refused with ``ResourceExhausted`` (never queued).
    max_in_flight: int = _DEFAULTS["max_in_flight"].default


@dataclass(frozen=True, slots=True)
class CoreStats:
    """Counters of the core's parts, for metrics (read at scrape time)."""

    branches: dict[str, int] = field(default_factory=dict)
    #: The library's name mirror: (synced, lookups skipped); None without one.
    mirror: tuple[bool, int] | None = None
    #: A sharded library's shards: (target, serving as this gateway last renewed it); None when
    #: not sharded.
    shards: tuple[tuple[str, bool], ...] | None = None
    library: dict[str, int] = field(default_factory=dict)


class GatewayCore:
    """Everything the gateway does, behind the wire formats."""

    def __init__(self, *, registry: TemplateRegistry, naming: Naming, stages: StageService,
                 branches: BranchManager | None, library: LibraryPort | None,
                 engines: EnginePort, corpus: CorpusPort | None, limits: Limits) -> None:
        self.registry = registry
        self.naming = naming
        self.stages = stages
        self.branches = branches
        self.library = library
        self.engines = engines
        self.corpus = corpus
        self.limits = limits
        self._write_lock = asyncio.Lock()
        self._reconciled = False
        #: Corpus records moved to new versions by reconciles since start.
        self.reconciled_records = 0
        self._reconcile_task: asyncio.Task[None] | None = None
        #: Demands being answered now, and demands refused because ``max_in_flight`` were.
        self.in_flight = 0
        self.refused_overload = 0
        #: What the core last saw of the library's restarts and of stale refusals.
        self._resyncs_seen = library.resyncs if library is not None else 0
        self._stale_seen = 0

    # -- what the edges ask ---------------------------------------------------------------------

    def stage(self, template_id: str, stage_id: str) -> Stage:
        """The registered stage ``template_id``/``stage_id`` (``NotFound`` names what is
        missing): how an edge resolves a demand's stage into the ``Demand``."""
        return self.registry.get(template_id).stage(stage_id)

    def decisions(self, template_id: str) -> tuple[DecisionPoint, ...]:
        """The decision points of a registered template."""
        return tuple(self.registry.get(template_id).decisions)

    def models(self) -> set[str]:
        """Models served by at least one engine."""
        return self.engines.models()

    def reuse_name(self, d: Demand) -> str:
        """The reuse name the demand path derives for ``d`` ("" when it has none)."""
        return str(self.naming.named(d)[1] or "")

    async def locate_history(self, affinity_key: str, model: str, history: str,
                             timeout_s: float) -> str:
        """The engine holding a workflow's history (``EnginePort.locate_history``)."""
        return await self.engines.locate_history(affinity_key, model, history, timeout_s)

    def stats(self) -> CoreStats:
        """Branch and library counters (metrics)."""
        mirror = getattr(self.library, "mirror", None)
        shards = getattr(self.library, "shards", None)
        return CoreStats(
            branches=dict(self.branches.counters) if self.branches is not None else {},
            mirror=(mirror.synced, mirror.skipped) if mirror is not None else None,
            shards=(tuple((s.target, s.serving) for s in shards) if shards is not None
                    else None),
            library=dict(getattr(self.library, "counters", {})) if shards is not None else {})

    # -- demands ----------------------------------------------------------------------------------

    def check(self, d: Demand) -> None:
        """Refuse a malformed demand, naming the field."""
        if not d.prompt:
            raise InvalidArgument("demand.prompt", "required")
        if len(d.prompt.encode()) > self.limits.max_prompt_bytes:
            raise PayloadTooLarge("demand.prompt",
                                  f"larger than {self.limits.max_prompt_bytes} bytes")
        if len(d.request_id) > self.limits.max_request_id:
            raise InvalidArgument("demand.header.id",
                                  f"at most {self.limits.max_request_id} characters")
        if bool(d.template_id) != bool(d.stage_id):
            raise InvalidArgument("demand.stage_id" if d.template_id else "demand.template_id",
                                  "template_id and stage_id go together")
        for name, items in (("inputs", d.inputs), ("outputs", d.outputs),
                            ("offered", d.offered)):
            if len(items) > self.limits.max_map_entries:
                raise InvalidArgument(f"demand.{name}",
                                      f"at most {self.limits.max_map_entries} entries")
        stage = d.stage
        if stage is None or stage.kind is StageKind.LLM:
            self.check_model(d.model)
            if d.sampling is None:
                raise InvalidArgument("demand.sampling", "required for llm stages")

    def check_model(self, model: str) -> None:
        """Refuse a missing or unserved model, naming the field."""
        if not model:
            raise InvalidArgument("demand.model", "required")
        served = self.engines.models()
        if model not in served:
            raise unknown_model(model, served)

    def max_tokens_limit(self, model: str) -> int:
        """The largest ``max_tokens`` a demand on ``model`` may ask for."""
        return self.engines.max_model_len(model) or 1

    async def call(self, d: Demand, timeout_s: float,
                   stream: TextStream | None = None) -> Answer:
        """Validate and answer one demand (``stream``: its text as an engine decodes it).

        At ``limits.max_in_flight`` demands in flight, one more is refused at once with
        ``ResourceExhausted`` (gRPC RESOURCE_EXHAUSTED, HTTP 429): overload never queues."""
        d = self.naming.resolved(d)  # in-process callers; an edge resolved it already
        self.check(d)
        if self.in_flight >= self.limits.max_in_flight:
            self.refused_overload += 1
            raise ResourceExhausted(f"gateway overloaded: {self.limits.max_in_flight} demands "
                                    "in flight (max_in_flight); retry later")
        self.in_flight += 1
        try:
            return await self.stages.run(d, timeout_s, stream)
        finally:
            self.in_flight -= 1
            self._act_on_counters()

    def _act_on_counters(self) -> None:
        """Reconcile when the library came back from a restart or a served result was refused
        as stale since the last look (the events the parts below report by counting)."""
        resyncs = self.library.resyncs if self.library is not None else 0
        stale = self.stages.library.refused_stale
        if resyncs != self._resyncs_seen or stale != self._stale_seen:
            self._resyncs_seen, self._stale_seen = resyncs, stale
            self.schedule_reconcile()

    async def register_template(self, text: str) -> Template:
        """Parse and register a YAML template; errors name the template and the path. Parsing
        runs in a thread (up to ~1 s of pure-Python YAML: the loop keeps serving meanwhile);
        registering runs here, on the loop, one at a time."""
        return self.registry.register(await asyncio.to_thread(parse_template_yaml, text))

    async def write(self, tenant: str, upserts: Sequence[Document], removals: Sequence[str],
                    record_ids: Sequence[str]) -> list[RecordVersion]:
        """Write corpus documents and other records; invalidate their readers in the library."""
        if (upserts or removals) and self.corpus is None:
            raise InvalidArgument("upserts", "this gateway has no retrieval corpus")
        if self.library is None:
            raise InvalidArgument("record_ids", "this gateway has no library to invalidate")
        self._act_on_counters()
        # The lock orders numbering, not acknowledgement: a write holds it (and the corpus's
        # write turn) until the library applied it and the corpus committed, so a reconcile
        # never reads the library's sequence in between; then it waits for its library write
        # to settle (a sharded library's commit wait) beside the other writes' waits.
        written: list[RecordVersion] = []
        applied: list[AppliedWrite] = []
        async with self._write_lock:
            if upserts or removals:
                documents, write = await self._write_corpus(upserts, removals)
                written += documents
                applied.append(write)
            if record_ids:
                write = await self.library.apply_records(tenant, record_ids)
                written += [RecordVersion(r, v)
                            for r, v in zip(record_ids, write.versions, strict=True)]
                applied.append(write)
        await asyncio.gather(*(write.settled() for write in applied))
        return written

    async def _write_corpus(self, upserts: Sequence[Document], removals: Sequence[str]
                            ) -> tuple[list[RecordVersion], AppliedWrite]:
        # Bump in the library first, then write the corpus with the library's versions: a search
        # in between reads old text at an old version and is refused as stale
        # (services/corpus/core.py). The corpus's write turn keeps the plan, the library's
        # versions and the commit together against every other gateway's writes
        # (services/corpus/service.py). Each record's floor is the corpus's own version of it, so
        # even a library that lost its store hands out versions above what the corpus holds.
        # The turn ends with the commit, before the library write settles (the caller waits for
        # that): once a quorum of shards applied it, its versions are final, and a search of the
        # new text reads them; what the commit wait guards (a shard that missed the write still
        # serving an entry that read the old text) concerns acknowledged writes, and a served
        # entry's corpus reads are checked against the corpus anyway (``StageService``).
        assert self.corpus is not None and self.library is not None
        if not self._reconciled:
            await self._reconcile()
        plan = await self.corpus.begin_write(upserts, removals)
        if len(plan.record_ids) > MAX_WRITE_RECORDS:  # more than one library write (or commit)
            await self._abort(plan.ticket)
            raise PayloadTooLarge("upserts", f"the write changes {len(plan.record_ids)} corpus "
                                  "records (a document, each of its distinct terms, the corpus "
                                  f"statistics); at most {MAX_WRITE_RECORDS} in one write")
        try:
            write = await self.library.apply_records("", plan.record_ids, plan.floors)
        except BaseException:
            await self._abort(plan.ticket)
            raise
        assigned = dict(zip(plan.record_ids, write.versions, strict=True))
        return list(await self.corpus.commit(plan.ticket, assigned)), write

    async def _abort(self, ticket: str) -> None:
        """Give the corpus's write turn back (best effort: an unanswered abort lapses)."""
        assert self.corpus is not None
        try:
            await asyncio.shield(self.corpus.abort(ticket))
        except Exception as exc:  # noqa: BLE001 - the ticket lapses on its own
            log.warning("corpus write ticket not aborted (%s); it lapses", exc)

    async def reconcile(self) -> int:
        """Agree with the library on the corpus's record versions; returns records moved.

        The corpus's versions all come from the library's write sequence, so a corpus record at
        a version above that sequence means the library lost or rolled back writes (a new or
        restored store). Its entries that read such a record could be stale, and its version
        table would make every search that reads one unstorable. Reconciling is a version-only
        write of exactly those records: the library bumps them above the corpus's versions
        (invalidating their readers), and the corpus adopts the new versions. Idempotent.
        """
        if self.corpus is None or self.library is None:
            return 0
        async with self._write_lock:
            return await self._reconcile()

    async def reconcile_at_start(self) -> None:
        """Reconcile before serving; when the library is unreachable, keep trying in the
        background (and the first corpus write reconciles first)."""
        try:
            await self.reconcile()
        except Exception as exc:  # noqa: BLE001 - start anyway, degraded
            log.warning("corpus reconcile with the csl failed at start (%s); retrying in the "
                        "background", exc)
            self.schedule_reconcile()

    def schedule_reconcile(self) -> None:
        """Reconcile in an owned background task (when the library may have restarted),
        retrying with backoff until it succeeds; a corpus write meanwhile reconciles first."""
        if self.corpus is None or self.library is None:
            return
        self._reconciled = False
        if self._reconcile_task is None or self._reconcile_task.done():
            self._reconcile_task = asyncio.create_task(  # a background job: in no trace
                self._reconcile_logged(), name="corpus-reconcile", context=untraced())

    async def _reconcile_logged(self) -> None:
        delay = 0.5
        while not self._reconciled:
            try:
                await self.reconcile()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - degrade: retry; writes reconcile first
                log.warning("corpus reconcile with the csl failed (%s); retrying in %.1f s",
                            exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONCILE_RETRY_MAX_S)

    async def _reconcile(self) -> int:
        assert self.corpus is not None and self.library is not None
        seq = await self.library.write_seq()
        plan = await self.corpus.begin_reconcile(seq)
        behind = plan.record_ids
        if behind:
            assigned: dict[str, int] = {}
            try:
                for start in range(0, len(behind), RECONCILE_BATCH):
                    ids = behind[start:start + RECONCILE_BATCH]
                    floors = plan.floors[start:start + RECONCILE_BATCH]
                    versions = await self.library.write_records("", ids, floors)
                    assigned.update(zip(ids, versions, strict=True))
            except BaseException:
                await self._abort(plan.ticket)
                raise
            await self.corpus.commit(plan.ticket, assigned)
        if behind:
            log.warning("csl write sequence %d is behind the corpus: moved %d corpus records "
                        "to new versions (their cached readers were invalidated)", seq,
                        len(behind))
        self._reconciled = True
        self.reconciled_records += len(behind)
        return len(behind)

    def settle(self, tenant: str, workflow_id: str, coordinate: str, selected: str) -> int:
        """Resolve a workflow's branch at ``coordinate`` with the harness's selection."""
        if not workflow_id:
            raise InvalidArgument("workflow_id", "required")
        self.registry.decision(coordinate)  # NotFound for an unknown coordinate
        if self.branches is None:
            return 0
        return self.branches.settle(tenant, workflow_id, coordinate, selected)

    async def close(self) -> None:
        """Stop branches and wait for stores."""
        if self._reconcile_task is not None:
            self._reconcile_task.cancel()
            await asyncio.gather(self._reconcile_task, return_exceptions=True)
        if self.branches is not None:
            await self.branches.close()
        await self.stages.close()


__all__ = ["CoreStats", "GatewayCore", "Limits"]
