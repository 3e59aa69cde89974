"""A versioned document corpus on LMDB with exact read-sets for BM25 search (DESIGN.md §5.3).

Records, as the CSL sees them (``<name>`` is the corpus name)::

    corpus/<name>/doc/<doc id>    one document: its title and text
    corpus/<name>/term/<term>     which documents hold <term>, how often, and their lengths
    corpus/<name>/stats           the statistics snapshot (N, avgdl, df) BM25 scores with

Read-set of a search, exact: every query term's record, the stats record, and each returned
document's record. Why that suffices: with the snapshot fixed, a document's score depends only on
its own term frequencies and length (``bm25.py``), and a document with no query term scores 0 and
is never returned. A write to document d bumps d's record and the term record of every term whose
weight in d can change (all of d's old and new terms when its length changes, else those whose
frequency moved), so any write that could change a score, add a document to the scored set or
drop one from it bumps a query term's record; a write that only changes returned text bumps that
document's record; a snapshot refresh bumps the stats record. Returning every scored document
instead would make read-sets as large as a posting list; bumping one corpus-wide record on every
write would invalidate every cached search on each write. The snapshot refreshes (and so
invalidates all searches) once writes since the last refresh exceed ``refresh_fraction`` of N.

Versions: a bulk load (``load_documents``, empty corpus only) gives every record version 0,
which is what the CSL assumes of records it never saw written. Each later write bumps records:
standalone, from the corpus's own monotone sequence; with the CSL, the caller first asks
``plan_write`` which records a write bumps, gets their versions from the CSL's ``WriteRecords``,
and passes them to ``write_documents(versions=...)``, so the two stores agree. A search in
between sees the old text at old versions, which the CSL already holds stale: a miss, not a
wrong hit. The gateway passes each record's current corpus version as the write's floor, and
reconciles with a CSL that lost writes (``records_above``, ``adopt_versions``). Between the plan
and the write no other write may land, or the plan is stale: with several gateways writing,
``service.CorpusService`` holds the corpus's write turn across the whole handshake.
A rebuilt corpus gets a new ``incarnation``; fold ``identity`` into the fingerprint of stages
that read it, since its version-0 records are not comparable with the old ones.

Layout: one LMDB environment, sub-databases ``meta`` (schema, name, incarnation, sequence,
writes since refresh, stats snapshot and its version), ``docs`` (doc id -> version, title, text)
and ``terms`` (term -> version). The index lives in memory, rebuilt at open and updated per
write; one lock orders searches and writes so a search never mixes two corpus states. A
search ranks on the index but reads every text and version it returns (documents, query-term
records, statistics record) from one LMDB snapshot and checks the store against the index, so
its read-set names exactly the versions of what it returned; where they disagree (the store
moved under the index) it rebuilds the index from the store and answers from that, and only a
store that still disagrees after the rebuild (a broken one) is an error.

One process opens a corpus at a time: an exclusive ``flock`` on the folder, taken before LMDB
opens it, refuses a second opener (another gateway or corpus service given the same folder,
whose in-memory index would fall behind this one's writes) with ``FailedPrecondition``; the
kernel drops it when the holder dies. Gateways of a mesh share one corpus through the corpus
service (``services/corpus/service.py``), never through one folder.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import lmdb

from services.common.values.errors import (
    DynbranchError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    quoted,
)
from services.corpus.bm25 import (
    CorpusStats,
    InvertedIndex,
    changed_terms,
    term_counts,
    tokenize,
    top_k,
)
from services.corpus.codec import (
    DOC_HEAD,
    MAX_DOC_ID_BYTES,
    U64,
    Document,
    Hit,
    RecordVersion,
    SearchResult,
    check_doc,
    decode_doc,
    encode_doc,
    refuse_duplicate,
    u64,
)
from services.corpus.records import RecordTable

SCHEMA = b"dynbranch.corpus/1"
#: LMDB map size and statistics-refresh fraction of a corpus that names none.
MAP_SIZE = 1 << 30
REFRESH_FRACTION = 0.1


@dataclass(frozen=True, slots=True)
class _Plan:
    counts: dict[str, Counter[str] | None]  # doc id -> new term counts (None: removed)
    docs: dict[str, Document | None]
    terms: tuple[str, ...]
    refresh: bool


class Corpus:
    """A named, versioned document corpus with BM25 search and exact read-sets."""

    def __init__(self, path: str | Path, name: str, *, create: bool = True,
                 map_size: int = MAP_SIZE, sync: bool = True, k1: float = 1.2, b: float = 0.75,
                 refresh_fraction: float = REFRESH_FRACTION) -> None:
        if not name or "/" in name:
            raise InvalidArgument("name", "must be non-empty and contain no '/'")
        self.name, self.k1, self.b, self.refresh_fraction = name, k1, b, refresh_fraction
        self._lock = threading.Lock()
        #: Searches answered after rebuilding an index the store had moved away from.
        self.rebuilds = 0
        if create:
            Path(path).mkdir(parents=True, exist_ok=True)
        self._folder_fd = _lock_folder(Path(path), name)
        try:
            self._env = lmdb.open(str(path), max_dbs=4, map_size=map_size, sync=sync,
                                  create=create)
        except lmdb.Error as exc:
            self._unlock()
            raise NotFound(f"corpus {name!r} at {path} cannot be opened: {exc}") from None
        self._meta = self._env.open_db(b"meta")
        self._docs = self._env.open_db(b"docs")
        self._terms = self._env.open_db(b"terms")
        self._closed = False
        try:
            self._init_meta(path)
            self._load_state()
        except BaseException:
            self.close()
            raise

    # --- lifecycle -------------------------------------------------------------------------

    def _init_meta(self, path: str | Path) -> None:
        with self._env.begin(write=True, db=self._meta) as txn:
            schema, name = txn.get(b"schema"), txn.get(b"name")
            if schema is None:
                txn.put(b"schema", SCHEMA)
                txn.put(b"name", self.name.encode())
                txn.put(b"incarnation", secrets.token_hex(8).encode())
            elif schema != SCHEMA or name != self.name.encode():
                raise FailedPrecondition(f"{path} holds corpus {name!r} ({schema!r}), "
                                         f"not {self.name!r}")
            self.incarnation = txn.get(b"incarnation").decode()

    def _load_state(self) -> None:
        self._index = InvertedIndex()
        self._records = records = RecordTable(self.name)
        with self._env.begin() as txn:
            for key, raw in txn.cursor(db=self._docs):
                doc, version = decode_doc(key, raw)
                self._index.put(doc.doc_id, term_counts(doc.title, doc.text))
                records.docs[doc.doc_id] = version
            records.terms = {k.decode(): U64.unpack(v)[0] for k, v in txn.cursor(db=self._terms)}
            records.seq = u64(txn.get(b"seq", db=self._meta))
            self._writes_since = u64(txn.get(b"writes_since", db=self._meta))
            records.stats = u64(txn.get(b"stats_version", db=self._meta))
            raw = txn.get(b"stats", db=self._meta)
        self._stats = CorpusStats.from_json(raw) if raw else self._index.stats()

    def close(self) -> None:
        """Close the LMDB environment and drop the folder's lock; safe to call twice."""
        if not self._closed:
            self._closed = True
            self._env.close()
            self._unlock()

    def _unlock(self) -> None:
        if self._folder_fd is not None:
            os.close(self._folder_fd)
            self._folder_fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def identity(self) -> str:
        """``name@incarnation``: distinguishes this corpus from a rebuilt one of the same name."""
        return f"{self.name}@{self.incarnation}"

    def __len__(self) -> int:
        return len(self._index)

    @property
    def write_seq(self) -> int:
        """Sequence of the last write: changes whenever any document does."""
        return self._records.seq

    def doc_versions(self) -> dict[str, int]:
        """Doc id → version of every document (a copy; may name a removed document until the
        corpus is reopened, when ``get`` returns None for it)."""
        with self._lock:
            return dict(self._records.docs)

    # --- records and versions ----------------------------------------------------------------
    # Record ids (``corpus/<name>/doc/<id>``, ``corpus/<name>/term/<term>``,
    # ``corpus/<name>/stats``), the current version of each, the records above a library's write
    # sequence, and the version-only write that reconciles the corpus with a library that lost
    # writes (``records_above``, ``adopt_versions``; ``GatewayCore.reconcile``).

    def doc_record(self, doc_id: str) -> str:
        """Record id of a document."""
        return self._records.doc_record(doc_id)

    def term_record(self, term: str) -> str:
        """Record id of a term's posting list."""
        return self._records.term_record(term)

    def stats_record(self) -> str:
        """Record id of the statistics snapshot."""
        return self._records.stats_record()

    def versions_of(self, record_ids: Sequence[str]) -> list[int]:
        """The corpus's current versions of ``record_ids``, in order (``version_of`` each)."""
        with self._lock:
            return [self._records.current(r) for r in record_ids]

    def records_above(self, seq: int) -> tuple[RecordVersion, ...]:
        """Every record the corpus holds at a version above ``seq``, sorted by id.

        A library whose write sequence is ``seq`` cannot know these versions: it lost or rolled
        back writes (``GatewayCore.reconcile``).
        """
        with self._lock:
            return self._records.above(seq)

    def adopt_versions(self, versions: Mapping[str, int]) -> None:
        """Move records to new versions without changing any text (a version-only write).

        Used to reconcile with a library that lost writes: the library bumps the records (above
        the corpus's versions, invalidating whatever read them), and the corpus adopts those
        versions, so that searches become storable again. Each version must be above the
        current one; a removed document's record is accepted and ignored. One transaction.
        """
        with self._lock:
            docs: dict[str, int] = {}
            terms: dict[str, int] = {}
            stats_version = None
            for record_id, version in versions.items():
                kind, key = self._records.split(record_id)
                if kind == "doc":
                    if key in self._index:
                        docs[key] = version
                elif kind == "term":
                    terms[key] = version
                else:
                    stats_version = version
            self._records.check_above(versions)
            seq = max([self._records.seq, *versions.values()])
            try:
                with self._env.begin(write=True) as txn:
                    for doc_id, version in docs.items():
                        doc, _ = decode_doc(doc_id.encode(),
                                            txn.get(doc_id.encode(), db=self._docs))
                        txn.put(doc_id.encode(), encode_doc(doc, version), db=self._docs)
                    for term, version in terms.items():
                        txn.put(term.encode(), U64.pack(version), db=self._terms)
                    txn.put(b"seq", U64.pack(seq), db=self._meta)
                    if stats_version is not None:
                        txn.put(b"stats_version", U64.pack(stats_version), db=self._meta)
            except BaseException:
                self._load_state()
                raise
            self._records.docs.update(docs)
            self._records.terms.update(terms)
            if stats_version is not None:
                self._records.stats = stats_version
            self._records.seq = seq

    def version_of(self, record_id: str) -> int:
        """The corpus's current version of one of its records (0: never written).

        A removed document keeps its last version until the corpus is reopened.
        """
        with self._lock:
            return self._records.current(record_id)

    # --- documents -------------------------------------------------------------------------

    def get(self, doc_id: str) -> tuple[Document, int] | None:
        """A stored document and its version, or None."""
        with self._env.begin(db=self._docs) as txn:
            raw = txn.get(doc_id.encode())
        return None if raw is None else decode_doc(doc_id.encode(), raw)

    # --- search ----------------------------------------------------------------------------

    def search(self, query: str, k: int) -> SearchResult:
        """The ``k`` best documents for ``query`` and the exact read-set: ranked on the index,
        every text and version read from one LMDB snapshot (module docstring)."""
        if k < 1:
            raise InvalidArgument("k", "must be >= 1")
        terms = sorted(set(tokenize(query)))
        if not terms:
            return SearchResult((), ())
        with self._lock:
            found = self._snapshot_search(terms, k)
            if isinstance(found, list):  # the store moved under the index: rebuild, answer fresh
                self._load_state()
                self.rebuilds += 1
                found = self._snapshot_search(terms, k)
                if isinstance(found, list):
                    raise DynbranchError(f"corpus {self.name!r}: the index disagrees with the "
                                         f"store on {found[:3]} even after a rebuild")
        hits, reads = found
        reads += [RecordVersion(self.doc_record(h.doc_id), h.version) for h in hits]
        return SearchResult(hits, tuple(sorted(reads, key=lambda r: r.record_id)))

    def _snapshot_search(self, terms: Sequence[str], k: int
                         ) -> tuple[tuple[Hit, ...], list[RecordVersion]] | list[str]:
        """Rank on the index, read from one LMDB snapshot; the hits and query reads, or the
        records on which the store disagrees with the index (under the lock)."""
        best = top_k(self._index.score(terms, self._stats, self.k1, self.b), k)
        with self._env.begin() as txn:
            hits: list[Hit] = []
            missing = []
            for doc_id, score in best:
                raw = txn.get(doc_id.encode(), db=self._docs)
                if raw is None:
                    missing.append(self.doc_record(doc_id))
                    continue
                doc, version = decode_doc(doc_id.encode(), raw)
                hits.append(Hit(doc.doc_id, doc.title, doc.text, version, score))
            reads = [RecordVersion(self.term_record(t), u64(txn.get(t.encode(), db=self._terms)))
                     for t in terms]
            reads.append(RecordVersion(self.stats_record(),
                                       u64(txn.get(b"stats_version", db=self._meta))))
        stale = missing + [self.doc_record(h.doc_id) for h in hits
                           if self._records.docs.get(h.doc_id) != h.version]
        stale += [r.record_id for r in reads if self._records.current(r.record_id) != r.version]
        return stale if stale else (tuple(hits), reads)

    def titles(self, after: str = "", limit: int = 1024) -> tuple[list[tuple[str, int, str]], bool]:
        """Up to ``limit`` documents with an id above ``after``, in id order, as ``(doc id,
        version, title)`` (one LMDB snapshot), and whether more follow."""
        out: list[tuple[str, int, str]] = []
        start = after.encode()
        with self._env.begin(db=self._docs) as txn:
            cursor = txn.cursor()
            if not cursor.set_range(start):
                return out, False
            for key, raw in cursor:
                if key == start:
                    continue
                if len(out) == limit:
                    return out, True
                version, title_len = DOC_HEAD.unpack_from(raw)
                title = bytes(raw[DOC_HEAD.size:DOC_HEAD.size + title_len]).decode()
                out.append((key.decode(), version, title))
        return out, False

    def confirm(self, hits: Sequence[Hit]) -> bool:
        """True when every hit is still stored at its version with exactly its title and text.

        One LMDB snapshot. False for a hit rewritten since (stale: not to be stored); a hit
        whose version is unchanged but whose text differs would be a broken store and is
        reported as an error, never stored.
        """
        with self._env.begin(db=self._docs) as txn:
            for hit in hits:
                raw = txn.get(hit.doc_id.encode())
                if raw is None:
                    return False
                doc, version = decode_doc(hit.doc_id.encode(), raw)
                if version != hit.version:
                    return False
                if (doc.title, doc.text) != (hit.title, hit.text):
                    raise DynbranchError(f"corpus {self.name!r}: document {hit.doc_id!r} at "
                                         f"version {version} holds another text than the one "
                                         "returned")
        return True

    # --- writes ----------------------------------------------------------------------------

    def load_documents(self, documents: Iterable[Document]) -> int:
        """Bulk-load an empty corpus at version 0, in one transaction; returns the count."""
        with self._lock:
            if len(self._index) or self._records.seq:
                raise FailedPrecondition(f"corpus {self.name!r} is not empty; write instead")
            docs: dict[str, Document] = {}
            for doc in documents:
                check_doc(doc)
                if doc.doc_id in docs:
                    raise InvalidArgument("documents",
                                          f"duplicate document id {quoted(doc.doc_id)}")
                docs[doc.doc_id] = doc
            for doc in docs.values():
                self._index.put(doc.doc_id, term_counts(doc.title, doc.text))
            self._stats, self._records.docs = self._index.stats(), dict.fromkeys(docs, 0)
            with self._env.begin(write=True) as txn:
                for doc in docs.values():
                    txn.put(doc.doc_id.encode(), encode_doc(doc, 0), db=self._docs)
                txn.put(b"stats", self._stats.to_json(), db=self._meta)
            return len(docs)

    def plan_write(self, upserts: Sequence[Document] = (), removals: Sequence[str] = ()
                   ) -> tuple[str, ...]:
        """Record ids that ``write_documents`` with these arguments would bump, sorted."""
        with self._lock:
            return self._record_ids(self._plan(upserts, removals))

    def write_documents(self, upserts: Sequence[Document] = (), removals: Sequence[str] = (),
                        versions: Mapping[str, int] | None = None) -> tuple[RecordVersion, ...]:
        """Upsert and remove documents; return every bumped record with its new version.

        ``versions`` (from the CSL's ``WriteRecords`` over ``plan_write``'s ids) must name
        exactly the bumped records, each above its current version; without it the corpus
        numbers them from its own sequence.
        """
        with self._lock:
            plan = self._plan(upserts, removals)
            assigned = self._assign(self._record_ids(plan), versions)
            self._apply(plan, assigned)
            return tuple(RecordVersion(r, assigned[r]) for r in sorted(assigned))

    def refresh_stats(self, versions: Mapping[str, int] | None = None) -> RecordVersion:
        """Take a new statistics snapshot now; every cached search becomes stale."""
        with self._lock:
            assigned = self._assign((self.stats_record(),), versions)
            self._apply(_Plan({}, {}, (), True), assigned)
            return RecordVersion(self.stats_record(), assigned[self.stats_record()])

    def _plan(self, upserts: Sequence[Document], removals: Sequence[str]) -> _Plan:
        docs: dict[str, Document | None] = {}
        for doc in upserts:
            check_doc(doc)
            refuse_duplicate(docs, doc.doc_id)
            docs[doc.doc_id] = doc
        for doc_id in removals:
            refuse_duplicate(docs, doc_id)
            if doc_id not in self._index:
                raise NotFound(f"corpus {self.name!r} has no document {quoted(doc_id)}")
            docs[doc_id] = None
        if not docs:
            raise InvalidArgument("documents", "a write needs at least one upsert or removal")
        counts = {i: None if d is None else term_counts(d.title, d.text) for i, d in docs.items()}
        terms = set().union(*(changed_terms(self._index.terms_of(i) if i in self._index
                                            else None, c) for i, c in counts.items()))
        writes = self._writes_since + len(docs)
        refresh = writes > self.refresh_fraction * max(self._stats.n, 1)
        return _Plan(counts, docs, tuple(sorted(terms)), refresh)

    def _record_ids(self, plan: _Plan) -> tuple[str, ...]:
        ids = [self.doc_record(i) for i in plan.docs] + [self.term_record(t) for t in plan.terms]
        return tuple(sorted(ids + [self.stats_record()] * plan.refresh))

    def _assign(self, ids: Sequence[str], versions: Mapping[str, int] | None) -> dict[str, int]:
        if versions is None:
            return {r: self._records.seq + i for i, r in enumerate(ids, start=1)}
        if set(versions) != set(ids):
            raise FailedPrecondition("versions must name exactly the records plan_write names "
                                     f"(missing {sorted(set(ids) - set(versions))[:3]}, "
                                     f"unexpected {sorted(set(versions) - set(ids))[:3]})")
        self._records.check_above(versions)
        return dict(versions)

    def _apply(self, plan: _Plan, assigned: Mapping[str, int]) -> None:
        """Commit a planned write to LMDB in one transaction, then to memory."""
        try:
            self._commit(plan, assigned)
        except BaseException:
            self._load_state()  # the index may hold part of the write: rebuild it from disk
            raise

    def _commit(self, plan: _Plan, assigned: Mapping[str, int]) -> None:
        stats, writes_since = self._stats, self._writes_since + len(plan.docs)
        if plan.refresh:
            stats, writes_since = self._stats_after(plan), 0
        seq = max(self._records.seq, *assigned.values())
        with self._env.begin(write=True) as txn:
            for doc_id, doc in plan.docs.items():
                key = doc_id.encode()
                if doc is None:
                    txn.delete(key, db=self._docs)
                else:
                    txn.put(key, encode_doc(doc, assigned[self.doc_record(doc_id)]),
                            db=self._docs)
            for term in plan.terms:
                txn.put(term.encode(), U64.pack(assigned[self.term_record(term)]),
                        db=self._terms)
            self._put_meta(txn, seq, writes_since, stats if plan.refresh else None,
                           assigned.get(self.stats_record()))
        self._remember(plan, assigned, stats, seq, writes_since)

    def _stats_after(self, plan: _Plan) -> CorpusStats:
        """Statistics after the write (applies it to the index early; ``_remember`` repeats it)."""
        for doc_id, counts in plan.counts.items():
            if counts is None:
                self._index.remove(doc_id)
            else:
                self._index.put(doc_id, counts)
        return self._index.stats()

    def _put_meta(self, txn: Any, seq: int, writes_since: int, stats: CorpusStats | None,
                  stats_version: int | None) -> None:
        txn.put(b"seq", U64.pack(seq), db=self._meta)
        txn.put(b"writes_since", U64.pack(writes_since), db=self._meta)
        if stats is not None and stats_version is not None:
            txn.put(b"stats", stats.to_json(), db=self._meta)
            txn.put(b"stats_version", U64.pack(stats_version), db=self._meta)

    def _remember(self, plan: _Plan, assigned: Mapping[str, int], stats: CorpusStats,
                  seq: int, writes_since: int) -> None:
        for doc_id, counts in plan.counts.items():
            if counts is None:
                self._index.remove(doc_id)
            else:
                self._index.put(doc_id, counts)
            self._records.docs[doc_id] = assigned[self.doc_record(doc_id)]
        for term in plan.terms:
            self._records.terms[term] = assigned[self.term_record(term)]
        if plan.refresh:
            self._stats, self._records.stats = stats, assigned[self.stats_record()]
        self._records.seq, self._writes_since = seq, writes_since


def _lock_folder(path: Path, name: str) -> int | None:
    """An exclusive ``flock`` on the corpus folder (None when the folder does not exist: LMDB
    then refuses to open it); ``FailedPrecondition`` when another opener holds it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise FailedPrecondition(
            f"corpus {name!r} at {path} is open in another process or corpus: one opener at a "
            "time (gateways share one corpus through the corpus service)") from None
    return fd


__all__ = ["MAP_SIZE", "MAX_DOC_ID_BYTES", "REFRESH_FRACTION", "Corpus", "Document", "Hit",
           "SearchResult"]
