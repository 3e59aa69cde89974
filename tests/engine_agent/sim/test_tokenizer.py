"""Toy tokenizer and pseudo-text: lossless pieces, ids stable across processes, determinism."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.engine_agent.sim import tokenizer
from services.engine_agent.sim.tokenizer import EOS_TOKEN_ID, PseudoText, encode, pieces

TEXTS = ["hello world", "  a  b\n\nc", "x=1234567; ünïcode  ", "", "a.,b", "Route: h1 -> h2!"]


@pytest.mark.parametrize("text", TEXTS)
def test_pieces_join_back_to_the_text(text: str) -> None:
    assert "".join(pieces(text)) == text
    assert len(encode(text)) == len(pieces(text))


def test_words_carry_their_leading_space_like_bpe() -> None:
    assert pieces("Hello, world  again") == ["Hello", ",", " world", " ", " again"]
    assert pieces("abcdefghij") == ["abcdefgh", "ij"]


def test_token_ids_are_stable_across_processes() -> None:
    script = "from services.engine_agent.sim.tokenizer import encode; print(list(encode('a b, c')))"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, check=True, cwd=os.getcwd()).stdout
    assert out.strip() == str(list(encode("a b, c")))


def test_every_output_piece_re_encodes_to_one_token() -> None:
    for piece in (*tokenizer._WORD_PIECES, *tokenizer._PUNCT):
        assert len(encode(piece)) == 1, piece
    assert EOS_TOKEN_ID not in tokenizer._WORD_IDS + tokenizer._PUNCT_IDS


def test_pseudo_text_depends_only_on_its_key_and_ends_at_eos() -> None:
    a, b, c = PseudoText(7, eos_at=5), PseudoText(7, eos_at=None), PseudoText(8, eos_at=None)
    first = [a.next() for _ in range(6)]
    assert first[:5] == [b.next() for _ in range(5)]
    assert first[5] == (EOS_TOKEN_ID, "")
    assert [c.next() for _ in range(5)] != first[:5]


ALPHABET = "ab cdXY  \n\n\t123456,.;-=ü"


@given(st.text(ALPHABET, max_size=200), st.text(ALPHABET, max_size=80))
def test_an_extended_text_encodes_as_if_scanned_from_the_start(base: str, tail: str) -> None:
    encode(base)  # known: the extension is scanned from near its end
    whole = base + tail
    assert encode(whole) == tuple(tokenizer.piece_id(p) for p in pieces(whole))
