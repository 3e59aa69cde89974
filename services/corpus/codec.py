"""Corpus values and their LMDB encoding: ``Document``, its checks and byte layouts, the
search results (``Hit``, ``SearchResult``), the record versions they read (``RecordVersion``),
and what the corpus service answers besides (``WritePlan``, ``CorpusInfo``, ``TitlePage``)."""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

from services.common.values.errors import InvalidArgument, quoted

MAX_DOC_ID_BYTES = 400  # LMDB keys are at most 511 bytes
U64 = struct.Struct(">Q")
DOC_HEAD = struct.Struct(">QI")


@dataclass(frozen=True, slots=True)
class RecordVersion:
    """One external record a stage read, at the version it saw (proto ``RecordVersion``)."""

    record_id: str
    version: int


@dataclass(frozen=True, slots=True)
class Document:
    """A document to store: stable id, title and text."""

    doc_id: str
    title: str
    text: str


@dataclass(frozen=True, slots=True)
class Hit:
    """A returned document with the version read and its score."""

    doc_id: str
    title: str
    text: str
    version: int
    score: float


@dataclass(frozen=True, slots=True)
class SearchResult:
    """Top documents, best first, and the exact read-set of the search."""

    hits: tuple[Hit, ...]
    reads: tuple[RecordVersion, ...]


@dataclass(frozen=True, slots=True)
class WritePlan:
    """A write holding the corpus's write turn (``CorpusService.begin_write``): the records it
    bumps, each with the corpus's current version as the csl's floor, and the ticket that
    commits (with the csl's versions) or aborts it. An empty ticket holds no turn: nothing to
    write (a reconcile that found every record known to the csl)."""

    ticket: str
    record_ids: tuple[str, ...]
    floors: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CorpusInfo:
    """What identifies a corpus and moves with every write."""

    name: str
    #: ``name@incarnation``: a rebuilt corpus of the same name has another.
    identity: str
    documents: int
    #: The highest version the corpus holds (moves with every write).
    write_seq: int


@dataclass(frozen=True, slots=True)
class TitlePage:
    """Documents in id order as ``(doc id, version, title)``; ``more``: others follow the last."""

    titles: tuple[tuple[str, int, str], ...]
    more: bool


def check_doc(doc: Document) -> None:
    """Refuse a document with a bad id, title or text."""
    if not isinstance(doc.doc_id, str) or not doc.doc_id:
        raise InvalidArgument("doc_id", "must be a non-empty string")
    if len(doc.doc_id.encode()) > MAX_DOC_ID_BYTES:
        raise InvalidArgument("doc_id", f"longer than {MAX_DOC_ID_BYTES} bytes")
    if not isinstance(doc.title, str) or not isinstance(doc.text, str):
        raise InvalidArgument("document", f"{quoted(doc.doc_id)}: title and text must be strings")


def refuse_duplicate(docs: Mapping[str, object], doc_id: str) -> None:
    """Refuse a document id that one write already names."""
    if doc_id in docs:
        raise InvalidArgument("documents", f"document {quoted(doc_id)} appears twice in one write")


def encode_doc(doc: Document, version: int) -> bytes:
    """A ``docs`` row: version, title length, title, text."""
    title = doc.title.encode()
    return DOC_HEAD.pack(version, len(title)) + title + doc.text.encode()


def decode_doc(key: bytes, raw: bytes) -> tuple[Document, int]:
    """The document and version of a ``docs`` row."""
    version, title_len = DOC_HEAD.unpack_from(raw)
    start = DOC_HEAD.size
    title = raw[start:start + title_len].decode()
    return Document(key.decode(), title, raw[start + title_len:].decode()), version


def u64(raw: bytes | None) -> int:
    """A stored big-endian u64; 0 when absent."""
    return 0 if raw is None else U64.unpack(raw)[0]


__all__ = ["DOC_HEAD", "MAX_DOC_ID_BYTES", "U64", "CorpusInfo", "Document", "Hit",
           "RecordVersion", "SearchResult", "TitlePage", "WritePlan", "check_doc", "decode_doc",
           "encode_doc", "refuse_duplicate", "u64"]
