"""The corpus's records and the versions it holds of them, in memory (``core.Corpus`` keeps
the same numbers in LMDB and rebuilds this table from it at open).

Record ids: ``corpus/<name>/doc/<id>`` (a document), ``corpus/<name>/term/<term>`` (a term's
posting list), ``corpus/<name>/stats`` (the statistics snapshot). A record never written is at
version 0; ``seq`` is the highest version held (every write moves it).
"""

from __future__ import annotations

from collections.abc import Mapping

from services.common.values.errors import FailedPrecondition, InvalidArgument, quoted
from services.corpus.codec import RecordVersion

KINDS = ("doc", "term", "stats")


class RecordTable:
    """Record ids of one corpus, and the version of each (doc, term and stats records)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.docs: dict[str, int] = {}
        self.terms: dict[str, int] = {}
        self.stats = 0
        self.seq = 0

    @property
    def prefix(self) -> str:
        """What every record id of this corpus starts with."""
        return f"corpus/{self.name}/"

    def doc_record(self, doc_id: str) -> str:
        """Record id of a document."""
        return f"{self.prefix}doc/{doc_id}"

    def term_record(self, term: str) -> str:
        """Record id of a term's posting list."""
        return f"{self.prefix}term/{term}"

    def stats_record(self) -> str:
        """Record id of the statistics snapshot."""
        return f"{self.prefix}stats"

    def split(self, record_id: str) -> tuple[str, str]:
        """``(kind, key)`` of a record id of this corpus (kind "doc", "term" or "stats");
        ``InvalidArgument`` naming ``versions`` for another corpus's or a malformed id."""
        kind, _, key = record_id.removeprefix(self.prefix).partition("/")
        if not record_id.startswith(self.prefix) or kind not in KINDS:
            raise InvalidArgument("versions", f"{quoted(record_id)} is not a record of corpus "
                                  f"{self.name!r}")
        return kind, key

    def current(self, record_id: str) -> int:
        """The version held of one of the corpus's records (0: never written)."""
        kind, _, key = record_id[len(self.prefix):].partition("/")
        if kind == "doc":
            return self.docs.get(key, 0)
        return self.terms.get(key, 0) if kind == "term" else self.stats

    def check_above(self, versions: Mapping[str, int]) -> None:
        """Refuse a version that is not above the record's current one (or not a u64)."""
        for record_id, version in versions.items():
            if not self.current(record_id) < version < 2**64:
                raise FailedPrecondition(f"version {version} of {record_id} is not above "
                                         f"the current {self.current(record_id)}")

    def above(self, seq: int) -> tuple[RecordVersion, ...]:
        """Every record held at a version above ``seq``, sorted by id."""
        out = [RecordVersion(self.doc_record(d), v) for d, v in self.docs.items() if v > seq]
        out += [RecordVersion(self.term_record(t), v) for t, v in self.terms.items() if v > seq]
        if self.stats > seq:
            out.append(RecordVersion(self.stats_record(), self.stats))
        return tuple(sorted(out, key=lambda r: r.record_id))


__all__ = ["KINDS", "RecordTable"]
