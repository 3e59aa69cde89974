"""One exception tree for the mesh; each class carries its gRPC status name and retryability.

    DynbranchError                      INTERNAL, generic client message, detail in the log
    ├── InvalidArgument(field, msg)     INVALID_ARGUMENT, message names the field
    │   └── PayloadTooLarge             RESOURCE_EXHAUSTED (oversize prompt or payload)
    ├── Unauthenticated                 UNAUTHENTICATED
    ├── NotFound                        NOT_FOUND
    ├── AlreadyExists                   ALREADY_EXISTS
    ├── FailedPrecondition              FAILED_PRECONDITION
    ├── ResourceExhausted               RESOURCE_EXHAUSTED (overload; retry may help)
    ├── Unavailable                     UNAVAILABLE (dependency down; retry may help)
    ├── DeadlineExceeded                DEADLINE_EXCEEDED
    └── Unimplemented                   UNIMPLEMENTED

Core modules raise these without importing grpc; ``services.common.runtime.grpc_errors`` maps them
to
status codes at the edge. ``status`` is the name of a ``grpc.StatusCode`` member.
"""

from __future__ import annotations

from typing import Any

#: The most characters of a message a client is sent: past it the message is cut and says how
#: much was left out, so an error that echoes a huge input still fits in a gRPC status (whose
#: trailers a client refuses past ~16 KB) or an HTTP error body.
MAX_CLIENT_MESSAGE = 1024
#: The most characters of an offending value an error message quotes (:func:`quoted`).
MAX_QUOTED = 80


def bounded(message: str, limit: int = MAX_CLIENT_MESSAGE) -> str:
    """``message`` cut to ``limit`` characters, saying how many were left out."""
    if len(message) <= limit:
        return message
    return f"{message[:limit]}... ({len(message) - limit} more characters)"


def quoted(value: Any, limit: int = MAX_QUOTED) -> str:
    """``repr(value)`` for an error message, cut to ``limit`` characters (a bounded prefix)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


class DynbranchError(Exception):
    """Base of every error a service reports to a caller."""

    status = "INTERNAL"
    retryable = False
    #: Internal errors hide their detail from clients; subclasses expose their message.
    client_visible = False

    def client_message(self) -> str:
        """Message safe to send to a client, at most about :data:`MAX_CLIENT_MESSAGE` long."""
        return bounded(str(self)) if self.client_visible else "internal error"


class InvalidArgument(DynbranchError):
    """A request field is missing or out of range; the message names the field."""

    status = "INVALID_ARGUMENT"
    client_visible = True

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class PayloadTooLarge(InvalidArgument):
    """A field is larger than the service accepts (prompt over the context, oversize payload)."""

    status = "RESOURCE_EXHAUSTED"


class Unauthenticated(DynbranchError):
    """Missing or unknown credentials."""

    status = "UNAUTHENTICATED"
    client_visible = True


class NotFound(DynbranchError):
    """The named object does not exist."""

    status = "NOT_FOUND"
    client_visible = True


class AlreadyExists(DynbranchError):
    """An object with this identity already exists (e.g. a duplicate request id)."""

    status = "ALREADY_EXISTS"
    client_visible = True


class FailedPrecondition(DynbranchError):
    """The system is not in a state that allows the operation."""

    status = "FAILED_PRECONDITION"
    client_visible = True


class ResourceExhausted(DynbranchError):
    """Overloaded; a later retry may succeed."""

    status = "RESOURCE_EXHAUSTED"
    retryable = True
    client_visible = True


class Unavailable(DynbranchError):
    """A dependency is down or the service is shutting down."""

    status = "UNAVAILABLE"
    retryable = True
    client_visible = True


class DeadlineExceeded(DynbranchError):
    """The caller's deadline ran out."""

    status = "DEADLINE_EXCEEDED"
    client_visible = True


class Unimplemented(DynbranchError):
    """The operation is not built yet (or not supported by this backend)."""

    status = "UNIMPLEMENTED"
    client_visible = True


__all__ = [
    "MAX_CLIENT_MESSAGE", "MAX_QUOTED", "AlreadyExists", "DeadlineExceeded", "DynbranchError",
    "FailedPrecondition", "InvalidArgument", "NotFound", "PayloadTooLarge", "ResourceExhausted",
    "Unauthenticated", "Unavailable", "Unimplemented", "bounded", "quoted",
]
