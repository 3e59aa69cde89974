"""Proto ↔ core values for the corpus service (STYLE.md §2); errors name the proto field."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from services.common.pb import common_pb2, corpus_pb2
from services.common.runtime.convert import require
from services.common.values.errors import InvalidArgument, PayloadTooLarge, quoted
from services.corpus.codec import MAX_DOC_ID_BYTES, Document, Hit, RecordVersion, SearchResult
from services.corpus.records import KINDS

#: Records per VersionsOf or Commit, and documents per write, at most.
MAX_RECORDS = 4096
MAX_WRITE_DOCUMENTS = 1024
#: Longest record id, query and ticket accepted (characters).
MAX_RECORD_ID_CHARS = 1024
MAX_QUERY_CHARS = 4096
MAX_TICKET_CHARS = 64
#: Largest versions the corpus takes (LMDB stores them as u64).
MAX_VERSION = 2**64 - 1


def doc_id_from_proto(value: str, field: str) -> str:
    """A required document id of at most ``MAX_DOC_ID_BYTES`` UTF-8 bytes."""
    require(value, field)
    if len(value.encode()) > MAX_DOC_ID_BYTES:
        raise InvalidArgument(field, f"longer than {MAX_DOC_ID_BYTES} bytes")
    return value


def document_from_proto(msg: corpus_pb2.CorpusDocument, field: str) -> Document:
    """A validated document."""
    return Document(doc_id_from_proto(msg.doc_id, f"{field}.doc_id"), msg.title, msg.text)


def document_to_proto(doc: Document) -> corpus_pb2.CorpusDocument:
    """The proto form of a document."""
    return corpus_pb2.CorpusDocument(doc_id=doc.doc_id, title=doc.title, text=doc.text)


def write_from_proto(request: corpus_pb2.CorpusBeginWriteRequest
                     ) -> tuple[list[Document], list[str]]:
    """The upserts and removals of a write, bounded; at least one of them."""
    if len(request.upserts) + len(request.removals) > MAX_WRITE_DOCUMENTS:
        raise PayloadTooLarge("upserts", f"at most {MAX_WRITE_DOCUMENTS} documents per write "
                              "(upserts and removals together)")
    upserts = [document_from_proto(d, f"upserts[{i}]") for i, d in enumerate(request.upserts)]
    removals = [doc_id_from_proto(r, f"removals[{i}]") for i, r in enumerate(request.removals)]
    if not (upserts or removals):
        raise InvalidArgument("upserts", "a write needs at least one upsert or removal")
    return upserts, removals


def hit_to_proto(hit: Hit) -> corpus_pb2.CorpusHit:
    """The proto form of a hit."""
    return corpus_pb2.CorpusHit(doc_id=hit.doc_id, title=hit.title, text=hit.text,
                                version=hit.version, score=hit.score)


def hit_from_proto(msg: corpus_pb2.CorpusHit, field: str = "hits") -> Hit:
    """A hit as sent back for confirmation."""
    return Hit(doc_id_from_proto(msg.doc_id, f"{field}.doc_id"), msg.title, msg.text,
               msg.version, msg.score)


def hits_from_proto(msgs: Sequence[corpus_pb2.CorpusHit], max_hits: int) -> list[Hit]:
    """Hits to confirm, at most ``max_hits``."""
    if len(msgs) > max_hits:
        raise PayloadTooLarge("hits", f"at most {max_hits} hits")
    return [hit_from_proto(h, f"hits[{i}]") for i, h in enumerate(msgs)]


def search_to_proto(result: SearchResult, incarnation: str) -> corpus_pb2.CorpusSearchResponse:
    """The proto form of a search result."""
    return corpus_pb2.CorpusSearchResponse(hits=[hit_to_proto(h) for h in result.hits],
                                           reads=versions_to_proto(result.reads),
                                           incarnation=incarnation)


def search_from_proto(msg: corpus_pb2.CorpusSearchResponse) -> SearchResult:
    """A search result from its proto form."""
    return SearchResult(tuple(Hit(h.doc_id, h.title, h.text, h.version, h.score)
                              for h in msg.hits), versions_from_proto(msg.reads))


def record_ids_from_proto(ids: Sequence[str], prefix: str, field: str = "record_ids"
                          ) -> list[str]:
    """Bounded record ids, each one of this corpus's (``prefix``: ``corpus/<name>/``)."""
    if len(ids) > MAX_RECORDS:
        raise PayloadTooLarge(field, f"at most {MAX_RECORDS} records")
    for i, record_id in enumerate(ids):
        require(record_id, f"{field}[{i}]", MAX_RECORD_ID_CHARS)
        kind = record_id.removeprefix(prefix).partition("/")[0]
        if not record_id.startswith(prefix) or kind not in KINDS:
            raise InvalidArgument(f"{field}[{i}]", f"{quoted(record_id)} is not a record of this "
                                  f"corpus ({prefix}doc/<id>, {prefix}term/<term> or "
                                  f"{prefix}stats)")
    return list(ids)


def record_versions_from_proto(msgs: Sequence[common_pb2.RecordVersion], prefix: str,
                               field: str = "versions") -> dict[str, int]:
    """A commit's versions: this corpus's records, each once, each at least 1."""
    ids = record_ids_from_proto([m.record_id for m in msgs], prefix, field)
    out: dict[str, int] = {}
    for i, (record_id, msg) in enumerate(zip(ids, msgs, strict=True)):
        if record_id in out:
            raise InvalidArgument(f"{field}[{i}].record_id", f"{quoted(record_id)} appears twice")
        if msg.version < 1:
            raise InvalidArgument(f"{field}[{i}].version", "must be >= 1")
        out[record_id] = msg.version
    return out


def versions_to_proto(versions: Iterable[RecordVersion]) -> list[common_pb2.RecordVersion]:
    """The proto form of record versions."""
    return [common_pb2.RecordVersion(record_id=v.record_id, version=v.version) for v in versions]


def versions_from_proto(msgs: Iterable[common_pb2.RecordVersion]) -> tuple[RecordVersion, ...]:
    """Record versions from their proto form."""
    return tuple(RecordVersion(m.record_id, m.version) for m in msgs)


def ticket_from_proto(value: str, field: str = "ticket") -> str:
    """A required ticket of bounded length."""
    return require(value, field, MAX_TICKET_CHARS)


__all__ = [
    "MAX_QUERY_CHARS", "MAX_RECORDS", "MAX_RECORD_ID_CHARS", "MAX_TICKET_CHARS", "MAX_VERSION",
    "MAX_WRITE_DOCUMENTS", "doc_id_from_proto", "document_from_proto", "document_to_proto",
    "hit_from_proto", "hit_to_proto", "hits_from_proto", "record_ids_from_proto",
    "record_versions_from_proto", "search_from_proto", "search_to_proto", "ticket_from_proto",
    "versions_from_proto", "versions_to_proto", "write_from_proto",
]
