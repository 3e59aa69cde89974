"""The gRPC edges of what delivery calls: the engine agents' lease and result RPCs
(``engines``), behind the ``EnginePort`` its core drives."""
