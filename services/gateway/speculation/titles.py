"""Corpus-aware candidate predictor: document titles named in the observation (dynbranch §2.1).

In ReAct the next hop searches an encyclopedia entry, so its entity is a corpus document *title*
("Steve Smith (musician)"), while the previous observation mentions it by its base form ("Steve
Smith"). ``CorpusTitles`` keeps an index of the corpus's titles keyed by their base form (the
title without a trailing parenthetical, as lower-case words) and ranks the titles whose base form
the observation names.

Matching: the observation is split into words; at each word the longest run of at most
``max_words`` words that is a base form counts as one mention of every title with that base
(greedy and non-overlapping, so "Smith" inside "Steve Smith" is not a second mention). A mention
must look like a name in the text: its first word capitalized (or a number), and a lone word not
one that merely opens a clause ("The", "However"). Cost per observation: one regex pass and at
most ``max_words`` dict lookups per word, independent of the corpus size.

Scores: each mention counts ``1 / passage rank`` when the observation holds numbered retrieval
passages (``[i] Title\\ntext``, the retrieve tool's format), so names in the best passage weigh
most; a title whose parenthetical words ("musician") also occur in the observation, or whose
full title is written out, gets a bonus that separates same-named entries. Titles of the passages
the observation returns (already read) and excluded candidates are never proposed.

Freshness: the index is built once (``refresh``) and brought up to date lazily when the corpus's
version key (identity, write sequence, size) changes; only documents whose version moved are read
again, so a write costs a dict comparison plus reads of the written documents.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Protocol

from services.common.values.candidates import RankedCandidate
from services.gateway.speculation.predictors import (
    TIE_STEP,
    PredictionContext,
    ranked_in_order,
)

#: Words that open a clause but name nothing: a lone one never counts as a title mention.
_STOP = frozenset(w.casefold() for w in (
    "A An The In On At As By For From After Before During When While His Her Its Their This That "
    "These Those It He She They We I You But And Or If Although Since Following Despite With Of "
    "To Upon Under Between According Also However Then There Here Some Many Most Is Was Are Were "
    "Be Not No Yes One Two All Other New Who What Where Which Why How"
).split())
_WORD = re.compile(r"\w+")
_PARENTHETICAL = re.compile(r"\s*\(([^)]*)\)\s*$")
_PASSAGE = re.compile(r"^\[(\d+)\] (.+)$", re.MULTILINE)
#: Bonus (in mentions) for a title whose parenthetical words occur, or that is written out.
_QUALIFIER_BONUS = 0.5
_FULL_BONUS = 0.5
#: Weight of ``CorpusTitles`` in the gateway's composite: above the prior and the observation's
#: capitalized names (weight 1), which it refines, so a title outranks its bare mention.
TITLE_WEIGHT = 2.0
#: What each title scores below the one before it (``CorpusTitles.rank``): its order within
#: equal scores is a ranking, as the entity extractor's is (``predictors.TIE_STEP``), but a
#: thousandth of that one's step, so that where the extractor names the same titles its order
#: stands in the composite (as it did before the step), and the titles only this predictor
#: names are no longer a tie.
TITLE_TIE_STEP = TIE_STEP / 1000


class Titled(Protocol):
    """A document as far as titles go."""

    @property
    def title(self) -> str:
        """Its title."""
        ...


class TitleSource(Protocol):
    """What ``CorpusTitles`` reads of a corpus (``services.gateway.tools.corpus.Corpus``)."""

    @property
    def identity(self) -> str:
        """Which corpus it is (a restart on another store is another identity)."""
        ...

    @property
    def write_seq(self) -> int:
        """Sequence of the last write."""
        ...

    def __len__(self) -> int:
        """How many documents it holds."""
        ...

    def doc_versions(self) -> dict[str, int]:
        """Doc id → version of every document."""
        ...

    def get(self, doc_id: str) -> tuple[Titled, int] | None:
        """``(document, version)``, or None."""
        ...


def base_form(title: str) -> str:
    """A title's base form: without a trailing parenthetical, lower-case words, one space apart."""
    return " ".join(_WORD.findall(_PARENTHETICAL.sub("", title).casefold()))


def normalized(title: str) -> str:
    """A whole title as lower-case words (parenthetical included)."""
    return " ".join(_WORD.findall(title.casefold()))


def _qualifier(title: str) -> tuple[str, ...]:
    match = _PARENTHETICAL.search(title)
    return tuple(_WORD.findall(match.group(1).casefold())) if match else ()


class TitleIndex:
    """Titles by base form, with per-document reference counts (several docs may share one)."""

    def __init__(self) -> None:
        self.by_base: dict[str, set[str]] = {}
        self.refs: Counter[str] = Counter()
        self.max_words = 0

    def add(self, title: str) -> None:
        """Count one more document titled ``title``."""
        base = base_form(title)
        if not base:
            return
        self.refs[title] += 1
        self.by_base.setdefault(base, set()).add(title)
        self.max_words = max(self.max_words, base.count(" ") + 1)

    def discard(self, title: str) -> None:
        """Count one document titled ``title`` fewer."""
        if self.refs[title] <= 1:
            self.refs.pop(title, None)
            base = base_form(title)
            titles = self.by_base.get(base)
            if titles is not None:
                titles.discard(title)
                if not titles:
                    del self.by_base[base]
        else:
            self.refs[title] -= 1

    def __len__(self) -> int:
        return len(self.refs)


class CorpusTitles:
    """Ranks corpus titles whose base form the observation mentions (module docstring)."""

    def __init__(self, corpus: TitleSource | None = None, *, titles: Iterable[str] = (),
                 limit: int = 20, max_words: int = 6) -> None:
        self.corpus, self.limit, self.max_words = corpus, limit, max_words
        self.index = TitleIndex()
        for title in titles:  # a fixed title list (no corpus) for tests and offline use
            self.index.add(title)
        self._docs: dict[str, tuple[int, str]] = {}  # doc id -> (version, title) indexed
        self._key: tuple[object, ...] | None = None
        self._lock = threading.Lock()

    # --- index maintenance -----------------------------------------------------------------

    @staticmethod
    def _version_key(corpus: TitleSource) -> tuple[object, ...]:
        return (corpus.identity, corpus.write_seq, len(corpus))

    def refresh(self) -> bool:
        """Bring the index up to date with the corpus; True when anything was re-read."""
        corpus = self.corpus
        if corpus is None:
            return False
        key = self._version_key(corpus)
        if key == self._key:
            return False
        with self._lock:
            if key == self._key:
                return False
            if self._key is not None and self._key[0] != key[0]:  # a rebuilt corpus
                for _, title in self._docs.values():
                    self.index.discard(title)
                self._docs = {}
            self._sync(corpus, corpus.doc_versions())
            self._key = key
        return True

    def _sync(self, corpus: TitleSource, versions: Mapping[str, int]) -> None:
        for doc_id in [d for d in self._docs if d not in versions]:
            self.index.discard(self._docs.pop(doc_id)[1])
        for doc_id, version in versions.items():
            seen = self._docs.get(doc_id)
            if seen is not None and seen[0] == version:
                continue
            found = corpus.get(doc_id)
            if seen is not None:
                self.index.discard(seen[1])
                del self._docs[doc_id]
            if found is not None:
                doc, stored = found
                self._docs[doc_id] = (stored, doc.title)
                self.index.add(doc.title)

    # --- ranking ---------------------------------------------------------------------------

    def rank(self, coordinate: str, context: PredictionContext) -> list[RankedCandidate]:
        """Titles mentioned in the observation, best first (at most ``limit``), each place
        ``TITLE_TIE_STEP`` below its score.

        Equal scores are common (one mention each in a question) and their order (``scores``:
        the first mentioned, then the shorter title) is this predictor's, not an arbitrary
        one. Sharing a probability, admission took them for a tie and learned them as one
        candidate (``admission.core.tied_ranks``), though their places are selected at
        different rates: on ReAct's first think (0.8 and 4/s, idle and moderate load, 5 seeds
        each), the third of three candidates tied at the top (most of them titles) was
        selected in none of 42 branches, and the warm controller priced it at 0.31 (issue 37)."""
        if not context.observation:
            return []
        self.refresh()
        scores = self.scores(context.observation, exclude=context.exclude)
        if context.candidates:
            allowed = set(context.candidates)
            scores = [(t, s) for t, s in scores if t in allowed]
        return ranked_in_order(scores[:self.limit], TITLE_TIE_STEP)

    def scores(self, text: str, exclude: Iterable[str] = ()) -> list[tuple[str, float]]:
        """``(title, score)`` for titles mentioned in ``text``, best first.

        Ties go to the title mentioned first, then to the shorter title.
        """
        passages = _passages(text)
        skip = set(exclude) | {title for _, title, _, _ in passages}
        headers = [(start, end) for _, _, start, end in passages]
        words = [(m.group(0), m.start()) for m in _WORD.finditer(text)
                 if not any(a <= m.start() < b for a, b in headers)]
        folded = [w.casefold() for w, _ in words]
        vocabulary = set(folded)
        score: dict[str, float] = {}
        first: dict[str, int] = {}
        longest = min(self.max_words, self.index.max_words)
        i = 0
        while i < len(words):
            n, titles = self._longest_match(folded, words, i, longest)
            if not titles:
                i += 1
                continue
            weight = _passage_weight(passages, words[i][1])
            for title in titles:
                if title not in skip:
                    score[title] = score.get(title, 0.0) + weight
                    first.setdefault(title, words[i][1])
            i += n
        lowered = " ".join(folded)
        for title in score:
            qualifier = _qualifier(title)
            if qualifier and all(w in vocabulary for w in qualifier):
                score[title] += _QUALIFIER_BONUS
            if qualifier and f" {normalized(title)} " in f" {lowered} ":
                score[title] += _FULL_BONUS
        order = sorted(score, key=lambda t: (-score[t], first[t], len(t), t))
        return [(t, score[t]) for t in order]

    def _longest_match(self, folded: list[str], words: list[tuple[str, int]], i: int,
                       longest: int) -> tuple[int, set[str]]:
        """The longest base form starting at word ``i`` that reads as a name, and its titles."""
        head = words[i][0]
        if not (head[0].isupper() or head[0].isdigit()):
            return 0, set()
        for n in range(min(longest, len(words) - i), 0, -1):
            titles = self.index.by_base.get(" ".join(folded[i:i + n]))
            if titles is None:
                continue
            if n == 1 and (folded[i] in _STOP or head.isdigit()):
                return 0, set()
            return n, titles
        return 0, set()


def _passages(text: str) -> list[tuple[int, str, int, int]]:
    """``(rank, title, start, end of the title line)`` of numbered passages in ``text``."""
    return [(int(m.group(1)), m.group(2).strip(), m.start(), m.end())
            for m in _PASSAGE.finditer(text)]


def _passage_weight(passages: list[tuple[int, str, int, int]], offset: int) -> float:
    """``1 / rank`` of the passage holding ``offset`` (1 outside numbered passages)."""
    rank = 1
    for number, _, start, _ in passages:
        if start > offset:
            break
        rank = max(number, 1)
    return 1.0 / rank


__all__ = ["TITLE_TIE_STEP", "TITLE_WEIGHT", "CorpusTitles", "TitleIndex", "TitleSource",
           "base_form", "normalized"]
