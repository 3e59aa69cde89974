"""Model-based test of the corpus (hypothesis, stateful): random upserts, removals, statistics
refreshes, reopenings and searches against a reference corpus and a reference BM25.

Every search must return exactly the current text of each document it returns, rank exactly as
BM25 over the reference snapshot ranks, and name in its read-set exactly the versions of what it
read. Versions come from a CSL-like global sequence (``plan_write`` then ``write_documents``), as
the gateway assigns them.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from services.corpus.bm25 import term_counts
from services.corpus.codec import Document
from services.corpus.core import Corpus

WORDS = ["alpha", "beta", "gamma", "delta", "omega", "sigma"]
IDS = ["a", "b", "c", "d", "e", "f", "g"]
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=5).map(" ".join)
queries = st.lists(st.sampled_from(WORDS), min_size=1, max_size=3).map(" ".join)
FRACTION = 0.3
K1, B = 1.2, 0.75


class RefCorpus:
    """What the corpus must hold: documents, record versions and the frozen snapshot."""

    def __init__(self) -> None:
        self.docs: dict[str, tuple[str, str]] = {}
        self.versions: dict[str, int] = {}
        self.snapshot = (0, 0.0, {})  # n, avgdl, df
        self.writes_since = 0

    def take_snapshot(self) -> None:
        counts = [term_counts(t, x) for t, x in self.docs.values()]
        n = len(counts)
        avgdl = sum(sum(c.values()) for c in counts) / n if n else 0.0
        df: Counter[str] = Counter()
        for c in counts:
            df.update(set(c))
        self.snapshot = (n, avgdl, dict(df))

    def rank(self, query: str, k: int) -> list[str]:
        n, avgdl, df = self.snapshot
        avgdl = avgdl if avgdl > 0 else 1.0
        terms = sorted(set(term_counts("", query)))
        scores: dict[str, float] = {}
        for term in terms:
            idf = math.log(1.0 + (n - df.get(term, 0) + 0.5) / (df.get(term, 0) + 0.5))
            for doc_id, (title, text) in self.docs.items():
                counts = term_counts(title, text)
                tf = counts.get(term, 0)
                if not tf:
                    continue
                norm = K1 * (1.0 - B + B * sum(counts.values()) / avgdl)
                scores[doc_id] = scores.get(doc_id, 0.0) + idf * tf * (K1 + 1.0) / (tf + norm)
        return [d for d, _ in sorted(scores.items(), key=lambda i: (-i[1], i[0]))[:k]]


class CorpusMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.mkdtemp()
        self.corpus = Corpus(self.folder, "m", sync=False, refresh_fraction=FRACTION)
        self.ref = RefCorpus()
        self.seq = 0  # the library's global version sequence

    def teardown(self) -> None:
        self.corpus.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _write(self, upserts: list[Document], removals: list[str]) -> None:
        ids = self.corpus.plan_write(upserts, removals)
        assigned = {}
        for record in ids:
            self.seq += 1
            assigned[record] = self.seq
        written = {r.record_id: r.version for r in
                   self.corpus.write_documents(upserts, removals, assigned)}
        assert written == assigned
        for doc in upserts:
            self.ref.docs[doc.doc_id] = (doc.title, doc.text)
        for doc_id in removals:
            del self.ref.docs[doc_id]
        self.ref.versions.update(assigned)
        self.ref.writes_since += len(upserts) + len(removals)
        if "corpus/m/stats" in assigned:
            self.ref.take_snapshot()
            self.ref.writes_since = 0

    @rule(doc_id=st.sampled_from(IDS), title=st.sampled_from(["", "alpha", "Omega"]),
          text=texts, marker=st.integers(0, 10**6))
    def upsert(self, doc_id: str, title: str, text: str, marker: int) -> None:
        self._write([Document(doc_id, title, f"{text} v{marker}")], [])

    @rule(data=st.data())
    @precondition(lambda self: bool(self.ref.docs))
    def remove(self, data: st.DataObject) -> None:
        doc_id = data.draw(st.sampled_from(sorted(self.ref.docs)))
        self._write([], [doc_id])

    @rule()
    def refresh(self) -> None:
        self.seq += 1
        written = self.corpus.refresh_stats({"corpus/m/stats": self.seq})
        assert written.version == self.seq
        self.ref.versions["corpus/m/stats"] = self.seq
        self.ref.take_snapshot()
        self.ref.writes_since = 0

    @rule()
    def reopen(self) -> None:
        self.corpus.close()
        self.corpus = Corpus(self.folder, "m", create=False, sync=False,
                             refresh_fraction=FRACTION)

    @rule(query=queries, k=st.integers(1, 4))
    def search(self, query: str, k: int) -> None:
        result = self.corpus.search(query, k)
        assert [h.doc_id for h in result.hits] == self.ref.rank(query, k)
        for hit in result.hits:
            assert (hit.title, hit.text) == self.ref.docs[hit.doc_id]
            assert hit.version == self.ref.versions.get(f"corpus/m/doc/{hit.doc_id}", 0)
        expected = {f"corpus/m/term/{t}" for t in term_counts("", query)}
        expected |= {"corpus/m/stats"} | {f"corpus/m/doc/{h.doc_id}" for h in result.hits}
        reads = {r.record_id: r.version for r in result.reads}
        assert set(reads) == expected
        for record, version in reads.items():
            assert version == self.ref.versions.get(record, 0), record

    @invariant()
    def same_documents(self) -> None:
        assert len(self.corpus) == len(self.ref.docs)


CorpusMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40,
                                           deadline=None)
TestCorpusModel = CorpusMachine.TestCase
