"""The gRPC edges of what admission calls: the engines' load streams (``engine_load``)."""
