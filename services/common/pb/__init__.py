"""Generated protobuf and gRPC stubs (python -m services.common.runtime.protogen); do not edit."""
