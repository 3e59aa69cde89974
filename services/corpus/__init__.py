"""Corpus service: the mesh's one retrieval corpus, a versioned document store on LMDB with a
BM25 index and exact read-sets (DESIGN.md §5.3), shared by every gateway of a mesh.

Core: ``core.Corpus`` (the LMDB store and its in-memory index, over ``bm25`` and ``codec``),
``loaders`` (the shared data sets), and ``service.CorpusService`` (the corpus for an event loop:
LMDB work on worker threads, and the write tickets that let one write at a time, from any
gateway, run its version handshake with the csl). Edge: ``servicer`` (with ``convert``),
``server``, ``client``. The face below is the in-process API (``services.common.values.face``).
"""

from typing import TYPE_CHECKING

from services.common.values.face import lazy_face

if TYPE_CHECKING:  # the table's names, typed, for mypy and IDEs (tests/test_types.py)
    from services.corpus.client import CorpusClient as CorpusClient
    from services.corpus.codec import CorpusInfo as CorpusInfo
    from services.corpus.codec import Document as Document
    from services.corpus.codec import Hit as Hit
    from services.corpus.codec import RecordVersion as RecordVersion
    from services.corpus.codec import SearchResult as SearchResult
    from services.corpus.codec import TitlePage as TitlePage
    from services.corpus.codec import WritePlan as WritePlan
    from services.corpus.config import CorpusSettings as CorpusSettings
    from services.corpus.core import Corpus as Corpus
    from services.corpus.loaders import LOADERS as LOADERS
    from services.corpus.loaders import DataUnavailable as DataUnavailable
    from services.corpus.loaders import data_path as data_path
    from services.corpus.loaders import default_data_dir as default_data_dir
    from services.corpus.loaders import hotpotqa_documents as hotpotqa_documents
    from services.corpus.loaders import load_corpus as load_corpus
    from services.corpus.loaders import magento_documents as magento_documents
    from services.corpus.loaders import musique_documents as musique_documents
    from services.corpus.loaders import read_jsonl as read_jsonl
    from services.corpus.loaders import require_data as require_data
    from services.corpus.loaders import use_data_dir as use_data_dir
    from services.corpus.server import build_runtime as build_runtime
    from services.corpus.service import CorpusService as CorpusService
else:  # at run time: each name imported from its module when first used
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
