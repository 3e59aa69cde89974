"""What every service shares that speaks no protocol: errors, generation requests and their
results, chat messages, candidates and fill estimates, reuse names and read sets, lease and
budget records, the record rule (``record_guard``), settings (``config``), the clock, and the
metrics and trace helpers (``telemetry``, ``tracing``: Prometheus and OpenTelemetry APIs, no
transport). Nothing here imports gRPC, the generated stubs or ``services.common.runtime``
(``tests/test_layering.py``)."""
