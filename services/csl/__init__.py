"""Completed-Subgraph Library (C1): exact, fresh, tenant-scoped reuse of completed stage
results, speculative shadows and their promotion, write-driven invalidation (dynbranch §3.2–§3.3).

Core: ``core.SubgraphLibrary`` (and ``async_library.AsyncSubgraphLibrary`` for an event loop),
over ``store`` (LMDB), ``confirmed_set``, ``shadows``, ``versions``, ``reverse_index``,
``eviction``, ``holds`` and ``name_feed``. Edge: ``servicer`` (with ``convert``), ``server``,
``client``. The face below is the in-process API (``services.common.values.face``).
"""

from services.common.values.face import lazy_face

__all__, __getattr__ = lazy_face(__name__, {
    "AsyncSubgraphLibrary": "async_library", "CslClient": "client", "CslSettings": "config",
    "LibraryOptions": "core", "SubgraphLibrary": "core", "build_runtime": "server",
})
