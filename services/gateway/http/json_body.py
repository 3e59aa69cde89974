"""A request body as JSON, within the front's stated limits (issue: every bad input a 4xx that
names the field).

``json.loads`` accepts what the rest of the gateway cannot carry: nesting deep enough to exhaust
the parser's recursion (``RecursionError``, a 500 before), and ``\\ud800``-style escapes that
decode to lone surrogates, which no UTF-8 encoder (protobuf, LMDB keys, the engine's tokenizer)
accepts. :func:`parse_json` refuses both as :class:`InvalidArgument` naming the body or the
field, so they are a 400 in every protocol's error shape.
"""

from __future__ import annotations

import json
import re
from typing import Any

from services.common.values.errors import InvalidArgument

#: The deepest nesting a body may have (objects and arrays). OpenAI's structured outputs allow 5
#: (10 on newer models) levels of schema nesting; a tool schema inside a request inside its body
#: adds about 6, so 64 leaves room for any honest request and stops hostile ones early.
MAX_JSON_DEPTH = 64
#: ``\ud800``-``\udfff`` escapes, the only way a surrogate gets into a decoded body.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def parse_json(raw: bytes) -> Any:
    """``raw`` decoded (UTF-8 JSON), refused past :data:`MAX_JSON_DEPTH` levels of nesting or
    with a string that is not valid Unicode text (a lone surrogate)."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise InvalidArgument("body", f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError:  # also UnicodeDecodeError
        raise InvalidArgument("body", "not valid JSON") from None
    # A surrogate can only come from a \u escape: strict UTF-8 decoding refuses raw ones. A body
    # with fewer openers than the limit cannot be nested past it (most requests: no walk).
    surrogates = _SURROGATE_ESCAPE.search(raw) is not None
    if surrogates or _deeper_than_limit(value):
        _check(value, surrogates)  # names the place
    return value


_CONTAINERS = (dict, list)


def _deeper_than_limit(value: Any) -> bool:
    """Whether ``value`` nests past :data:`MAX_JSON_DEPTH`, level by level (about 50 ns per
    value: no paths, comprehensions only)."""
    level = [value] if type(value) in _CONTAINERS else []
    for _ in range(MAX_JSON_DEPTH):
        if not level:
            return False
        level = [item for node in level
                 for item in (node.values() if type(node) is dict else node)
                 if type(item) in _CONTAINERS]
    return bool(level)


def _check(value: Any, surrogates: bool) -> None:
    """Walk ``value``'s containers without recursion: their depth, and (when the body has
    ``\\ud`` escapes) that every string and key encodes as UTF-8. A path is kept as a linked
    tuple and spelled (``messages[0].content``) only for an error."""
    stack: list[tuple[Any, Path, int]] = []
    if isinstance(value, dict | list):
        stack.append((value, None, 1))
    while stack:
        node, path, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise InvalidArgument(_spell(path, top=True), f"nested deeper than {MAX_JSON_DEPTH} "
                                                          f"levels")
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, item in items:
            if surrogates and isinstance(key, str):
                _text(key, path)
            if isinstance(item, dict | list):
                stack.append((item, (path, key), depth + 1))
            elif surrogates and isinstance(item, str):
                _text(item, (path, key))
    if surrogates and isinstance(value, str):
        _text(value, None)


#: A place in the body: None for the body, else (the parent's place, a key or an index).
Path = tuple[Any, str | int] | None


def _spell(path: Path, top: bool = False) -> str:
    """``path`` as a field name; ``top``: only its top-level field (a depth error's path is as
    long as the nesting)."""
    parts: list[str | int] = []
    while path is not None:
        path, key = path
        parts.append(key)
    if top:
        parts = parts[-1:]
    text = ""
    for key in reversed(parts):
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else key)
    return text or "body"


def _text(text: str, path: Path) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(_spell(path), f"is not valid Unicode text (a lone surrogate at "
                                     f"character {exc.start})") from None


__all__ = ["MAX_JSON_DEPTH", "parse_json"]
