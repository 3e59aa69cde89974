"""Tags on the wire: HTTP request hooks and transports that add the current tags
(``context.current_tags``) to every request as ``x-dynbranch-*`` headers.

The official clients take an HTTP client (``http_client=``): ``openai`` 3.x an ``httpx`` or an
``httpx2`` one, ``anthropic`` 2.x only an ``httpx2`` one. The hooks and transports here work
with both libraries (they only touch ``request.headers``), so any of these tags the requests of
the calling code::

    openai.AsyncOpenAI(base_url=..., http_client=async_tagging_client(
        openai.DefaultAsyncHttpxClient))                       # the client's own defaults
    anthropic.Anthropic(base_url=..., http_client=tagging_client(anthropic.DefaultHttpxClient))
    httpx.AsyncClient(event_hooks={"request": [atag_request]})  # the hook alone
    httpx.Client(transport=TaggingTransport(httpx.HTTPTransport()))  # or a transport

A header the caller set (a client's ``default_headers``, a request's ``extra_headers``) is never
overwritten, whatever its value. The hooks run in the task that makes the request, so the tags
are that task's.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any, Protocol, TypeVar, overload

import httpx

from services.gateway.tagging.context import Tags, current_tags


class HttpRequest(Protocol):
    """What is tagged: an ``httpx`` or ``httpx2`` request (or anything with such headers)."""

    @property
    def headers(self) -> MutableMapping[str, str]: ...


class SyncTransport(Protocol):
    """An ``httpx`` or ``httpx2`` sync transport."""

    def handle_request(self, request: Any, /) -> Any: ...

    def close(self) -> None: ...


class AsyncTransport(Protocol):
    """An ``httpx`` or ``httpx2`` async transport."""

    async def handle_async_request(self, request: Any, /) -> Any: ...

    async def aclose(self) -> None: ...


R = TypeVar("R", bound=HttpRequest)
C = TypeVar("C")


def add_tags(request: R, tags: Tags | None = None) -> R:
    """Set on ``request`` each header of ``tags`` (default: the current ones) it lacks."""
    for name, value in (current_tags() if tags is None else tags).headers().items():
        if name not in request.headers:  # case-insensitive in both libraries
            request.headers[name] = value
    return request


def tag_request(request: HttpRequest) -> None:
    """Request event hook of a sync client: the current tags, unless already set."""
    add_tags(request)


async def atag_request(request: HttpRequest) -> None:
    """Request event hook of an async client: the current tags, unless already set."""
    add_tags(request)


class TaggingTransport(httpx.BaseTransport):
    """A sync transport that tags each request, then sends it on ``transport`` (default: a
    plain ``httpx.HTTPTransport``; for an ``httpx2`` client pass an ``httpx2`` one)."""

    def __init__(self, transport: SyncTransport | None = None) -> None:
        self.transport: SyncTransport = (transport if transport is not None
                                         else httpx.HTTPTransport())

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response: httpx.Response = self.transport.handle_request(add_tags(request))
        return response

    def close(self) -> None:
        self.transport.close()


class AsyncTaggingTransport(httpx.AsyncBaseTransport):
    """An async transport that tags each request, then sends it on ``transport`` (default: a
    plain ``httpx.AsyncHTTPTransport``; for an ``httpx2`` client pass an ``httpx2`` one)."""

    def __init__(self, transport: AsyncTransport | None = None) -> None:
        self.transport: AsyncTransport = (transport if transport is not None
                                          else httpx.AsyncHTTPTransport())

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response: httpx.Response = await self.transport.handle_async_request(add_tags(request))
        return response

    async def aclose(self) -> None:
        await self.transport.aclose()


def _with_hook(kwargs: dict[str, Any], hook: Any) -> dict[str, Any]:
    hooks = {kind: list(fns) for kind, fns in (kwargs.pop("event_hooks", None) or {}).items()}
    hooks["request"] = [hook, *hooks.get("request", [])]
    return {**kwargs, "event_hooks": hooks}


@overload
def tagging_client(factory: None = None, /, **kwargs: Any) -> httpx.Client: ...
@overload
def tagging_client(factory: Callable[..., C], /, **kwargs: Any) -> C: ...
def tagging_client(factory: Callable[..., Any] | None = None, /, **kwargs: Any) -> Any:
    """``factory(**kwargs)`` (a sync client class: ``httpx.Client`` by default,
    ``httpx2.Client``, ``openai.DefaultHttpxClient``, ``anthropic.DefaultHttpxClient``) whose
    requests carry the current tags; its request hooks run first, any given are kept."""
    return (factory or httpx.Client)(**_with_hook(kwargs, tag_request))


@overload
def async_tagging_client(factory: None = None, /, **kwargs: Any) -> httpx.AsyncClient: ...
@overload
def async_tagging_client(factory: Callable[..., C], /, **kwargs: Any) -> C: ...
def async_tagging_client(factory: Callable[..., Any] | None = None, /, **kwargs: Any) -> Any:
    """``factory(**kwargs)`` (an async client class: ``httpx.AsyncClient`` by default,
    ``httpx2.AsyncClient``, ``openai.DefaultAsyncHttpxClient``,
    ``anthropic.DefaultAsyncHttpxClient``) whose requests carry the current tags."""
    return (factory or httpx.AsyncClient)(**_with_hook(kwargs, atag_request))


__all__ = ["AsyncTaggingTransport", "AsyncTransport", "HttpRequest", "SyncTransport",
           "TaggingTransport", "add_tags", "async_tagging_client", "atag_request", "tag_request",
           "tagging_client"]
