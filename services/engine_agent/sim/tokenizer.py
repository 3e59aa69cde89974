"""A deterministic toy tokenizer and pseudo-text generator for the ``sim`` backend.

Token ids are stable across processes and machines (blake2b of the piece, never ``hash()``),
so block hashes, prefix hits and outputs reproduce exactly. Pieces follow the usual BPE shape:
a word of up to 8 ASCII letters with its leading space, up to 3 digits, up to 4 other
characters, or a run of whitespace; about 1.3 tokens per English word.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import itertools
import random
import re

from services.engine_agent.sim.recent import recent

#: Piece pattern; the alternatives cover every character, so pieces always join back to the text.
_PIECE_RE = re.compile(r" ?[A-Za-z]{1,8}| ?\d{1,3}| ?[^\sA-Za-z\d]{1,4}|\s+(?!\S)|\s+")

#: Output vocabulary of the pseudo-text: each entry re-encodes to exactly one token.
_WORDS = (
    "the of and to in is that for it as with was on be by this are or from at an which but "
    "not have has one can its all were they their more also if will two into other would "
    "some these time than only there first may new when about after over most such use "
    "then each state between both through during model agent tool result branch query value "
    "record answer search city river year film author team book game song album order item "
    "price user data stage plan step check next route cache score rank table field node edge "
    "graph token block reply input output source target event north south east west "
    "early late small large high low long short open close left right start end"
).split()
_PUNCT = (".", ",", "\n")
_PUNCT_RATE = 0.12


def piece_id(piece: str) -> int:
    """Stable 32-bit token id of one piece."""
    return _piece_id(piece)


@functools.lru_cache(maxsize=1 << 16)
def _piece_id(piece: str) -> int:
    return int.from_bytes(hashlib.blake2b(piece.encode(), digest_size=4).digest(), "little")


def pieces(text: str) -> list[str]:
    """Split ``text`` into token pieces; ``"".join(pieces(t)) == t``."""
    return _PIECE_RE.findall(text)


def encode(text: str) -> tuple[int, ...]:
    """Token ids of ``text``.

    Cached, and incremental: an agent's prompts grow by appending (history, then the
    observation, then the next output), so a text that extends a recently encoded one is
    tokenized only from near the end of that one. Restarting the scan at a piece boundary at
    least ``_RESCAN_CHARS`` characters before the end of the known text gives exactly the
    pieces a scan from the start would (every piece pattern decides its end within a few
    characters), so the result never differs from a full scan.
    """
    return _ENCODED.encode(text)


#: Characters before the end of a known prefix where an incremental scan restarts (>> the
#: 8 characters any piece pattern looks ahead).
_RESCAN_CHARS = 64


class _Encoded:
    """The recently encoded texts: token ids and the end offset of every piece, by text."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._texts: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}

    def encode(self, text: str) -> tuple[int, ...]:
        return recent(self._texts, text, lambda: self._scan(text), self.size)[0]

    def _scan(self, text: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        ids: tuple[int, ...] = ()
        ends: tuple[int, ...] = ()
        start = 0
        base = self._longest_prefix(text)
        if base is not None:
            known_ids, known_ends = self._texts[base]
            keep = bisect.bisect_right(known_ends, len(base) - _RESCAN_CHARS)
            if keep:
                ids, ends, start = known_ids[:keep], known_ends[:keep], known_ends[keep - 1]
        found = _PIECE_RE.findall(text, start)
        new_ends = tuple(itertools.accumulate(map(len, found), initial=start))[1:]
        return ids + tuple(map(_piece_id, found)), ends + new_ends

    def _longest_prefix(self, text: str) -> str | None:
        best: str | None = None
        for known in self._texts:
            if (len(known) > _RESCAN_CHARS and len(known) < len(text)
                    and (best is None or len(known) > len(best)) and text.startswith(known)):
                best = known
        return best


_ENCODED = _Encoded()


def text_key(*parts: str) -> int:
    """Stable 64-bit key of some strings (used to seed the pseudo-text)."""
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


_WORD_PIECES = tuple(" " + w for w in _WORDS)
_WORD_IDS = tuple(_piece_id(p) for p in _WORD_PIECES)
_PUNCT_IDS = tuple(_piece_id(p) for p in _PUNCT)
EOS_TOKEN_ID = _piece_id("<|im_end|>")


class PseudoText:
    """Deterministic output stream of one generation: ``(token_id, piece)`` per step.

    The stream depends only on ``key``; ``eos_at`` is the output index at which the model
    emits EOS (text ``""``), or None for never.
    """

    __slots__ = ("_rng", "_index", "_after_punct", "eos_at")

    def __init__(self, key: int, eos_at: int | None) -> None:
        self._rng = random.Random(key)
        self._index = 0
        self._after_punct = True
        self.eos_at = eos_at

    def next(self) -> tuple[int, str]:
        """The next output token id and its text."""
        index = self._index
        self._index += 1
        if index == self.eos_at:
            return EOS_TOKEN_ID, ""
        rng = self._rng
        if not self._after_punct and rng.random() < _PUNCT_RATE:
            self._after_punct = True
            i = rng.randrange(len(_PUNCT))
            return _PUNCT_IDS[i], _PUNCT[i]
        self._after_punct = False
        i = rng.randrange(len(_WORD_PIECES))
        return _WORD_IDS[i], _WORD_PIECES[i]


class ScriptedText(PseudoText):
    """An output stream that spells a given text piece by piece, then EOS (a simulated model's
    tool call or JSON answer: its length, and so its decode time, is the text's)."""

    __slots__ = ("_pieces",)

    def __init__(self, text: str) -> None:
        super().__init__(0, len(pieces(text)))
        self._pieces = pieces(text)

    def next(self) -> tuple[int, str]:
        """The next piece of the text and its id, then EOS."""
        index = self._index
        self._index += 1
        if index >= len(self._pieces):
            return EOS_TOKEN_ID, ""
        return piece_id(self._pieces[index]), self._pieces[index]


__all__ = ["EOS_TOKEN_ID", "PseudoText", "ScriptedText", "encode", "piece_id", "pieces", "text_key"]
