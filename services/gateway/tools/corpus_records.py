"""The records of a corpus and their versions (the base of ``corpus.Corpus``).

Record ids (``corpus/<name>/doc/<id>``, ``corpus/<name>/term/<term>``, ``corpus/<name>/stats``),
the current version of each, the records above a library's write sequence, and the version-only
write that reconciles the corpus with a library that lost writes: a CSL whose write sequence is
below the corpus's versions (empty, or restored from an older copy) gets a version-only write of
exactly the records above it (``records_above``, ``adopt_versions``; ``GatewayCore.reconcile``),
which invalidates whatever it cached from them.
The state it reads and writes is loaded and kept by ``Corpus``; every method here takes the
corpus lock itself or is called under it.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from services.common.values.errors import FailedPrecondition, InvalidArgument
from services.gateway.tools.base import RecordVersion
from services.gateway.tools.bm25 import InvertedIndex
from services.gateway.tools.corpus_codec import U64, decode_doc, encode_doc


class CorpusRecords(abc.ABC):
    """Record ids and versions of a corpus; ``Corpus`` holds the state."""

    name: str
    _lock: threading.Lock
    _env: Any
    _meta: Any
    _docs: Any
    _terms: Any
    _index: InvertedIndex
    _doc_versions: dict[str, int]
    _term_versions: dict[str, int]
    _stats_version: int
    _seq: int

    @abc.abstractmethod
    def _load_state(self) -> None:
        """Rebuild the in-memory state from the store (after a failed transaction)."""

    def doc_record(self, doc_id: str) -> str:
        """Record id of a document."""
        return f"corpus/{self.name}/doc/{doc_id}"

    def term_record(self, term: str) -> str:
        """Record id of a term's posting list."""
        return f"corpus/{self.name}/term/{term}"

    def stats_record(self) -> str:
        """Record id of the statistics snapshot."""
        return f"corpus/{self.name}/stats"

    def versions_of(self, record_ids: Sequence[str]) -> list[int]:
        """The corpus's current versions of ``record_ids``, in order (``version_of`` each)."""
        with self._lock:
            return [self._current(r) for r in record_ids]

    def records_above(self, seq: int) -> tuple[RecordVersion, ...]:
        """Every record the corpus holds at a version above ``seq``, sorted by id.

        A library whose write sequence is ``seq`` cannot know these versions: it lost or rolled
        back writes (``GatewayCore.reconcile``).
        """
        with self._lock:
            out = [RecordVersion(self.doc_record(d), v) for d, v in self._doc_versions.items()
                   if v > seq]
            out += [RecordVersion(self.term_record(t), v)
                    for t, v in self._term_versions.items() if v > seq]
            if self._stats_version > seq:
                out.append(RecordVersion(self.stats_record(), self._stats_version))
        return tuple(sorted(out, key=lambda r: r.record_id))

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
                kind, key = self._split(record_id)
                if not record_id.startswith(self._prefix) or kind not in ("doc", "term", "stats"):
                    raise InvalidArgument("versions", f"{record_id!r} is not a record of "
                                          f"corpus {self.name!r}")
                if kind == "doc":
                    if key in self._index:
                        docs[key] = version
                elif kind == "term":
                    terms[key] = version
                else:
                    stats_version = version
            self._check_above(versions)
            seq = max([self._seq, *versions.values()])
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
            self._doc_versions.update(docs)
            self._term_versions.update(terms)
            if stats_version is not None:
                self._stats_version = stats_version
            self._seq = seq

    def version_of(self, record_id: str) -> int:
        """The corpus's current version of one of its records (0: never written).

        A removed document keeps its last version until the corpus is reopened.
        """
        with self._lock:
            return self._current(record_id)

    @property
    def _prefix(self) -> str:
        return f"corpus/{self.name}/"

    def _split(self, record_id: str) -> tuple[str, str]:
        """``(kind, key)`` of a record id of this corpus ("doc", "term" or "stats")."""
        kind, _, key = record_id[len(self._prefix):].partition("/")
        return kind, key

    def _current(self, record_id: str) -> int:
        kind, key = self._split(record_id)
        if kind == "doc":
            return self._doc_versions.get(key, 0)
        return self._term_versions.get(key, 0) if kind == "term" else self._stats_version

    def _check_above(self, versions: Mapping[str, int]) -> None:
        """Refuse a version that is not above the record's current one (or not a u64)."""
        for record_id, version in versions.items():
            if not self._current(record_id) < version < 2**64:
                raise FailedPrecondition(f"version {version} of {record_id} is not above "
                                         f"the current {self._current(record_id)}")


__all__ = ["CorpusRecords"]
