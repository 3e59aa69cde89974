"""Corpus service: the mesh's one retrieval corpus, a versioned document store on LMDB with a
BM25 index and exact read-sets (DESIGN.md §5.3), shared by every gateway of a mesh.

Core: ``core.Corpus`` (the LMDB store and its in-memory index, over ``bm25`` and ``codec``),
``loaders`` (the shared data sets), and ``service.CorpusService`` (the corpus for an event loop:
LMDB work on worker threads, and the write tickets that let one write at a time, from any
gateway, run its version handshake with the csl). Edge: ``servicer`` (with ``convert``),
``server``, ``client``. The face below is the in-process API (``services.common.values.face``).
"""

from services.common.values.face import lazy_face

__all__, __getattr__ = lazy_face(__name__, {
    "Corpus": "core", "CorpusClient": "client", "CorpusInfo": "codec",
    "CorpusService": "service", "CorpusSettings": "config", "DataUnavailable": "loaders",
    "Document": "codec", "Hit": "codec", "LOADERS": "loaders", "RecordVersion": "codec",
    "SearchResult": "codec", "TitlePage": "codec", "WritePlan": "codec",
    "build_runtime": "server", "data_path": "loaders", "default_data_dir": "loaders",
    "hotpotqa_documents": "loaders", "load_corpus": "loaders", "magento_documents": "loaders",
    "musique_documents": "loaders", "read_jsonl": "loaders", "require_data": "loaders",
    "use_data_dir": "loaders",
})
