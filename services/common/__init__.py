"""What every service shares: ``values`` (protocol-free: errors, generation requests, leases,
reuse names, the record rule, settings) and ``runtime`` (may speak gRPC: server bootstrap,
clients, status mapping, message conversion, telemetry, tracing), and the generated stubs
(``pb``). Values never import runtime."""
