"""The corpus's values and LMDB rows: document checks, the row layout, u64 records."""

from __future__ import annotations

import pytest

from services.common.values.errors import InvalidArgument
from services.corpus.codec import (
    MAX_DOC_ID_BYTES,
    U64,
    Document,
    check_doc,
    decode_doc,
    encode_doc,
    refuse_duplicate,
    u64,
)


def test_a_row_round_trips_title_text_and_version() -> None:
    doc = Document("Zoë (band)", "Zoë — a title", "text with\nnew lines and ünïcode")
    assert decode_doc(doc.doc_id.encode(), encode_doc(doc, 2**63)) == (doc, 2**63)
    empty = Document("e", "", "")
    assert decode_doc(b"e", encode_doc(empty, 0)) == (empty, 0)


@pytest.mark.parametrize("doc, field", [
    (Document("", "t", "x"), "doc_id"),
    (Document("é" * (MAX_DOC_ID_BYTES // 2 + 1), "t", "x"), "doc_id"),
    (Document("a", None, "x"), "document"),  # type: ignore[arg-type]
])
def test_bad_documents_are_refused_by_field(doc: Document, field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        check_doc(doc)
    assert err.value.field == field


def test_duplicates_and_u64_records() -> None:
    with pytest.raises(InvalidArgument, match="twice"):
        refuse_duplicate({"a": None}, "a")
    refuse_duplicate({"a": None}, "b")
    assert u64(None) == 0 and u64(U64.pack(7)) == 7
