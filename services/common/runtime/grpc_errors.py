"""Edge mapping between the mesh's exception tree and gRPC status codes, both ways: a servicer's
error to the status a client sees (``status_for``, one interceptor), and a peer's status back to
the mesh's error (``error_from_rpc``, used by every adapter that calls a service)."""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from grpc._cython import cygrpc

from services.common.values.errors import (
    AlreadyExists,
    DeadlineExceeded,
    DynbranchError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PayloadTooLarge,
    ResourceExhausted,
    Unavailable,
)

log = logging.getLogger(__name__)

#: Raised into a handler still reading its request stream when the server stops; gRPC itself
#: handles it quietly, so it passes through (it is not a servicer error to log).
_SERVER_STOPPED = getattr(cygrpc, "_ServerStoppedError", grpc.aio.AbortError)
_PASS_THROUGH = (grpc.aio.AbortError, KeyboardInterrupt, SystemExit, _SERVER_STOPPED)


def status_of(exc: DynbranchError) -> grpc.StatusCode:
    """The gRPC status code an error class carries."""
    return grpc.StatusCode[exc.status]


def status_for(exc: BaseException, method: str) -> tuple[grpc.StatusCode, str]:
    """The status and message a client sees for ``exc`` raised in ``method``; an internal or
    unexpected error is logged here and its detail hidden."""
    if isinstance(exc, DynbranchError):
        if exc.status == "INTERNAL":
            log.error("internal error in %s", method, exc_info=exc, extra={"method": method})
        return status_of(exc), exc.client_message()
    log.error("unhandled error in %s", method, exc_info=exc, extra={"method": method})
    return grpc.StatusCode.INTERNAL, "internal error"


def error_from_rpc(err: grpc.aio.AioRpcError, peer: str, call: str = "", *,
                   field_prefix: str = "", callers_deadline: bool = True) -> DynbranchError:
    """The mesh's error for a status ``peer`` answered ``call`` with: the inverse of
    ``status_for``.

    A field error (``INVALID_ARGUMENT`` or ``RESOURCE_EXHAUSTED`` whose detail is
    ``field: message``) keeps the peer's field and message, under ``field_prefix`` (the request
    field the caller passed through); ``RESOURCE_EXHAUSTED`` without a field is overload;
    ``NOT_FOUND``, ``ALREADY_EXISTS`` and ``FAILED_PRECONDITION`` keep their class and the peer's
    detail; ``DEADLINE_EXCEEDED`` is the caller's ``DeadlineExceeded`` when the deadline was the
    caller's own (``callers_deadline``), else a dependency that did not answer. Anything else
    (down, internal, cancelled, unknown) is ``Unavailable``: retryable, with the peer's detail
    hidden."""
    code, details = err.code(), err.details() or ""
    field, sep, message = details.partition(": ")
    what = f"{peer} {call}".rstrip()
    if code == grpc.StatusCode.INVALID_ARGUMENT and sep:
        return InvalidArgument(field_prefix + field, message)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        if sep:
            return PayloadTooLarge(field_prefix + field, message)
        return ResourceExhausted(f"{peer} is overloaded: {details}")
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidArgument(field_prefix.rstrip(".") or "request", details)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED and callers_deadline:
        return DeadlineExceeded(f"{what} did not finish before the deadline")
    if code == grpc.StatusCode.NOT_FOUND:
        return NotFound(f"{peer}: {details}")
    if code == grpc.StatusCode.ALREADY_EXISTS:
        return AlreadyExists(details or f"{what}: already exists")
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        return FailedPrecondition(f"{peer}: {details}")
    return Unavailable(f"{what} failed ({code.name}); submit again")


async def _abort(context: grpc.aio.ServicerContext, exc: BaseException, method: str) -> None:
    await context.abort(*status_for(exc, method))


Parse = Callable[[bytes], Any]


def _parser(deserializer: Parse | None, method: str) -> Parse:
    """The request parser of a method: an unparsable request is INVALID_ARGUMENT naming the
    method (grpc's own deserializer failure is an UNKNOWN status and a logged traceback)."""
    if deserializer is None:
        return lambda raw: raw

    def parse(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except DecodeError:
            raise InvalidArgument(
                "request", f"not a valid request message for {method}") from None
    return parse


async def _parsed(requests: AsyncIterator[bytes], parse: Parse) -> AsyncIterator[Any]:
    async for raw in requests:
        yield parse(raw)


def _wrap_unary(behavior: Callable[..., Awaitable[Any]], method: str, parse: Parse,
                streaming_request: bool = False) -> Callable[..., Any]:
    async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            request = _parsed(request, parse) if streaming_request else parse(request)
            return await behavior(request, context)
        except _PASS_THROUGH:
            raise
        except Exception as exc:  # noqa: BLE001 - mapped to a status, never leaked
            await _abort(context, exc, method)
    return wrapper


def _wrap_stream(behavior: Callable[..., Any], method: str, parse: Parse,
                 streaming_request: bool = False) -> Callable[..., Any]:
    if not inspect.isasyncgenfunction(behavior):
        # A streaming handler may be a coroutine that writes with ``context.write`` (gRPC
        # health's Watch is): it is wrapped like a unary one.
        return _wrap_unary(behavior, method, parse, streaming_request)

    async def wrapper(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        try:
            request = _parsed(request, parse) if streaming_request else parse(request)
            async for item in behavior(request, context):
                yield item
        except _PASS_THROUGH:
            raise
        except Exception as exc:  # noqa: BLE001 - mapped to a status, never leaked
            await _abort(context, exc, method)
    return wrapper


class ErrorInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc: untyped
    """Turns ``DynbranchError`` into its status and anything else into a generic INTERNAL, and
    an unparsable request into INVALID_ARGUMENT.

    Wrapped handlers are built once per method and reused: the interceptor runs on every call.
    """

    def __init__(self) -> None:
        self._wrapped: dict[str, Any] = {}

    async def intercept_service(self, continuation: Callable[..., Awaitable[Any]],
                                handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method  # one handler per method for a server's life
        wrapped = self._wrapped.get(method)
        if wrapped is None:
            wrapped = self._wrapped[method] = _wrap(handler, method)
        return wrapped


def _wrap(handler: Any, method: str) -> Any:
    """The handler with errors mapped and requests parsed here (raw bytes come in)."""
    parse = _parser(handler.request_deserializer, method)
    kwargs = {"request_deserializer": None, "response_serializer": handler.response_serializer}
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(
            _wrap_unary(handler.unary_unary, method, parse), **kwargs)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(
            _wrap_stream(handler.unary_stream, method, parse), **kwargs)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(
            _wrap_unary(handler.stream_unary, method, parse, streaming_request=True), **kwargs)
    return grpc.stream_stream_rpc_method_handler(
        _wrap_stream(handler.stream_stream, method, parse, streaming_request=True), **kwargs)


__all__ = ["ErrorInterceptor", "error_from_rpc", "status_for", "status_of"]
