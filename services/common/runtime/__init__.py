"""What every service runs on, and may speak gRPC: the server and its command line
(``server``, ``cli_args``), channels (``clients``, ``tls``), the status mapping both ways
(``grpc_errors``), message conversion (``convert``, ``lease_convert``), record headers
(``records``) and stub generation (``protogen``; the stubs are ``services.common.pb``)."""
