"""Generated protobuf and gRPC stubs (python -m services.common.protogen); do not edit."""
