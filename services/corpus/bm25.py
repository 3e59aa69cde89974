"""BM25 over an in-memory inverted index, scored against a frozen statistics snapshot.

Okapi BM25 (Robertson & Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond",
2009) with Lucene's non-negative idf: for a query term t and document d,

    idf(t) = ln(1 + (N - df_t + 0.5) / (df_t + 0.5))
    w(t, d) = idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * |d| / avgdl))

N, df and avgdl come from a ``CorpusStats`` snapshot that only changes when it is refreshed, so a
document's score depends on nothing but its own terms and the snapshot. That is what lets the
corpus give a search an exact read-set of a few records (see ``core.py``). Scoring is plain
Python over postings dicts: the corpora here have thousands of documents, and the index must
take single-document updates, which the sparse-matrix libraries (bm25s, rank-bm25) do not.
"""

from __future__ import annotations

import heapq
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

_TOKEN = re.compile(r"\w+")
MAX_TERM_CHARS = 64
STOPWORDS = frozenset([
    "a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are",
    "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but",
    "by", "can", "could", "did", "do", "does", "doing", "down", "during", "each", "few", "for",
    "from", "further", "had", "has", "have", "having", "he", "her", "here", "hers", "herself",
    "him", "himself", "his", "how", "i", "if", "in", "into", "is", "it", "its", "itself",
    "just", "me", "more", "most", "my", "myself", "no", "nor", "not", "now", "of", "off", "on",
    "once", "only", "or", "other", "our", "ours", "ourselves", "out", "over", "own", "same",
    "she", "should", "so", "some", "such", "than", "that", "the", "their", "theirs", "them",
    "themselves", "then", "there", "these", "they", "this", "those", "through", "to", "too",
    "under", "until", "up", "very", "was", "we", "were", "what", "when", "where", "which",
    "while", "who", "whom", "why", "will", "with", "would", "you", "your", "yours", "yourself",
    "yourselves", "s", "t",
])


def tokenize(text: str) -> list[str]:
    """Case-folded word tokens without stop words or over-long tokens."""
    return [t for t in _TOKEN.findall(text.casefold())
            if t not in STOPWORDS and len(t) <= MAX_TERM_CHARS]


def term_counts(title: str, text: str) -> Counter[str]:
    """Indexed term frequencies of a document (its title counts as text)."""
    return Counter(tokenize(title) + tokenize(text))


@dataclass(frozen=True, slots=True)
class CorpusStats:
    """A snapshot of the corpus statistics BM25 scores with."""

    n: int
    avgdl: float
    df: Mapping[str, int] = field(default_factory=dict)

    def idf(self, term: str) -> float:
        """Lucene's BM25 idf (never negative)."""
        df = self.df.get(term, 0)
        return math.log(1.0 + (self.n - df + 0.5) / (df + 0.5))

    def to_json(self) -> bytes:
        """Serialized snapshot (floats round-trip exactly)."""
        return json.dumps({"n": self.n, "avgdl": self.avgdl, "df": self.df},
                          sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> CorpusStats:
        """Inverse of ``to_json``."""
        data = json.loads(raw)
        return cls(int(data["n"]), float(data["avgdl"]), dict(data["df"]))


class InvertedIndex:
    """Term -> document -> term frequency, with document lengths, updated one document at a time."""

    def __init__(self) -> None:
        self._postings: dict[str, dict[str, int]] = {}
        self._docs: dict[str, Counter[str]] = {}
        self._lengths: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._docs)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._docs

    def terms_of(self, doc_id: str) -> Counter[str]:
        """The indexed term counts of a document (empty when absent)."""
        return self._docs.get(doc_id, Counter())

    def put(self, doc_id: str, counts: Counter[str]) -> None:
        """Index (or re-index) a document."""
        self.remove(doc_id)
        self._docs[doc_id] = counts
        self._lengths[doc_id] = sum(counts.values())
        for term, tf in counts.items():
            self._postings.setdefault(term, {})[doc_id] = tf

    def remove(self, doc_id: str) -> None:
        """Drop a document from the index (no-op when absent)."""
        old = self._docs.pop(doc_id, None)
        self._lengths.pop(doc_id, None)
        for term in old or ():
            posting = self._postings[term]
            del posting[doc_id]
            if not posting:
                del self._postings[term]

    def stats(self) -> CorpusStats:
        """A fresh statistics snapshot of the current contents."""
        n = len(self._docs)
        avgdl = sum(self._lengths.values()) / n if n else 0.0
        return CorpusStats(n, avgdl, {t: len(p) for t, p in sorted(self._postings.items())})

    def score(self, terms: Iterable[str], stats: CorpusStats, k1: float = 1.2,
              b: float = 0.75) -> dict[str, float]:
        """BM25 scores of every document containing a term; terms are summed in sorted order."""
        avgdl = stats.avgdl if stats.avgdl > 0 else 1.0
        scores: dict[str, float] = {}
        for term in sorted(set(terms)):
            posting = self._postings.get(term)
            if not posting:
                continue
            idf = stats.idf(term)
            for doc_id, tf in posting.items():
                norm = k1 * (1.0 - b + b * self._lengths[doc_id] / avgdl)
                scores[doc_id] = scores.get(doc_id, 0.0) + idf * tf * (k1 + 1.0) / (tf + norm)
        return scores


def changed_terms(old: Counter[str] | None, new: Counter[str] | None) -> set[str]:
    """Terms whose BM25 contribution for this document may change when ``old`` becomes ``new``.

    A change of length changes every term's weight; otherwise only terms whose frequency moved.
    ``None`` is an absent document.
    """
    old, new = old or Counter(), new or Counter()
    if sum(old.values()) != sum(new.values()):
        return set(old) | set(new)
    return {t for t in set(old) | set(new) if old[t] != new[t]}


def top_k(scores: Mapping[str, float], k: int) -> list[tuple[str, float]]:
    """The ``k`` best ``(doc_id, score)``: higher score first, ties by document id."""
    return heapq.nsmallest(k, scores.items(), key=lambda item: (-item[1], item[0]))


__all__ = [
    "MAX_TERM_CHARS", "STOPWORDS", "CorpusStats", "InvertedIndex", "changed_terms", "term_counts",
    "tokenize", "top_k",
]
