"""Completed-Subgraph Library (C1): exact, fresh, tenant-scoped reuse of completed stage
results, speculative shadows and their promotion, write-driven invalidation (dynbranch §3.2–§3.3).

Core: ``library.SubgraphLibrary`` (and ``async_library.AsyncSubgraphLibrary`` for an event loop).
Edge: ``servicer``, ``server``, ``client``.
"""
