"""Completed-Subgraph Library (C1): exact, fresh, tenant-scoped reuse of completed stage
results, speculative shadows and their promotion, write-driven invalidation (dynbranch §3.2–§3.3).

Core: ``core.SubgraphLibrary`` (and ``async_library.AsyncSubgraphLibrary`` for an event loop),
over ``store`` (LMDB), ``confirmed_set``, ``shadows``, ``versions``, ``reverse_index``,
``eviction``, ``holds`` and ``name_feed``. Edge: ``servicer`` (with ``convert``), ``server``,
``client``. The face below is the in-process API (``services.common.values.face``).
"""

from typing import TYPE_CHECKING

from services.common.values.face import lazy_face

if TYPE_CHECKING:  # the table's names, typed, for mypy and IDEs (tests/test_types.py)
    from services.csl.async_library import AsyncSubgraphLibrary as AsyncSubgraphLibrary
    from services.csl.client import CslClient as CslClient
    from services.csl.config import CslSettings as CslSettings
    from services.csl.core import LibraryOptions as LibraryOptions
    from services.csl.core import SubgraphLibrary as SubgraphLibrary
    from services.csl.server import build_runtime as build_runtime
else:  # at run time: each name imported from its module when first used
    __all__, __getattr__ = lazy_face(__name__, {
        "AsyncSubgraphLibrary": "async_library", "CslClient": "client", "CslSettings": "config",
        "LibraryOptions": "core", "SubgraphLibrary": "core", "build_runtime": "server",
    })
