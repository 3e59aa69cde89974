"""``http.json_body``: nesting past the limit and lone surrogates (high or low, in a value, a
key or the whole body) are refused naming the place; a surrogate pair is a character like any
other. Found by the full HTTP fuzz: a low surrogate (``\\udfff``) got past a check that knew only
high ones and reached the engine as a 500."""

from __future__ import annotations

import pytest

from services.common.values.errors import InvalidArgument
from services.gateway.http.json_body import MAX_JSON_DEPTH, parse_json


@pytest.mark.parametrize(("raw", "field"), [
    (b'"a\\udfffb"', "body"),
    (b'{"x": ["\\uDC00"]}', "x[0]"),
    (b'{"m": {"\\ud800": [1]}}', "m"),
    (b'{"messages": [{"content": "\\ud83d"}]}', "messages[0].content"),
    (b'{"x": ' + b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH + b"}", "x"),
    (b"[" * 2000 + b"]" * 2000, "body"),
])
def test_refused_naming_the_place(raw: bytes, field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        parse_json(raw)
    assert err.value.field == field


def test_within_the_limits_is_parsed() -> None:
    assert parse_json(b'{"a": "\\ud83d\\ude00 \\u00e9"}') == {"a": "\U0001f600 \u00e9"}
    nested = b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    assert parse_json(nested) is not None
