"""The gateway's HTTP front (DESIGN.md §3 gateway): an edge, like the servicer.

Routes: ``POST /v1/chat/completions`` and ``POST /v1/completions`` (OpenAI), ``POST
/v1/responses`` (OpenAI's Responses API), ``POST /v1/messages`` and ``POST
/v1/messages/count_tokens`` (Anthropic's Messages API), each JSON or server-sent events with
``stream: true``; ``GET /v1/models`` and ``GET /v1/models/{id}``, and ``GET /healthz``.
A starlette app served by uvicorn inside the gateway's own event loop: :meth:`HttpFront.start`
binds the port, :meth:`HttpFront.close` stops it (idempotent).

Every request is parsed by its protocol's module (``http.schema``, ``http.responses``,
``http.messages``) into one arrival representation and becomes one core ``Demand`` through
``http.arrival``, whatever protocol it came in on; only the answer is rendered per protocol (a
:class:`Wire`). The tenant comes only from the API key (``Authorization: Bearer``, or
Anthropic's ``x-api-key``; a tenant-like header a caller sets is never read); workflow tags come
from ``x-dynbranch-*`` headers (``x-dynbranch-stage: template/stage`` names a template stage);
the prompt is the completion prompt or the rendered conversation (``http.chat``); a request
with tools or a JSON response format also carries its chat spec to the engine. ``n`` choices are
one demand each (greedy choices share one). A tagged request offers its tools as candidates, and
one whose conversation ends in a function's results settles the workflow's branches with that
function. Answers carry ``x-dynbranch-source`` (engine, library, promoted_fill, joined) and
``x-dynbranch-reuse-name``. Errors use each protocol's error shape and status codes. A client
that goes away cancels its call, and the cancellation aborts the engine work. Every request is
counted and timed by route, protocol, status and source, and every 4xx/5xx logs one line,
rate-limited, without the body (``http.observe``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import uvicorn
from opentelemetry import context as otel_context
from opentelemetry.trace import Tracer
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from services.common.values.errors import DynbranchError
from services.common.values.tracing import has_span, incoming_context, maybe_span, workflow_context
from services.gateway.auth import Authenticator
from services.gateway.core import GatewayCore
from services.gateway.http import messages
from services.gateway.http.arrival import (
    HEADER_STAGE,
    MAX_SEED,
    TAG_HEADERS,
    Arrival,
    check_model,
    demand_of,
    settle_from_history,
)
from services.gateway.http.bodies import BodyTooLarge, error_body
from services.gateway.http.connections import ConnectionLimits, bounded_protocol
from services.gateway.http.json_body import parse_json
from services.gateway.http.observe import FAULT, HttpMetrics, Observed
from services.gateway.http.stream import (
    CallStream,
    ClientGone,
    Item,
    outcome,
    unless_disconnected,
)
from services.gateway.http.wires import DEFAULT_WIRE, WIRES, Wire
from services.gateway.values import Answer, AnswerSource, Demand, TextStream, new_request_id

log = logging.getLogger(__name__)

HEADER_SOURCE = "x-dynbranch-source"
HEADER_REUSE_NAME = "x-dynbranch-reuse-name"


def error_response(exc: DynbranchError, wire: Wire = DEFAULT_WIRE,
                   request: Request | None = None) -> JSONResponse:
    """The protocol's error JSON with the status for ``exc``; internal errors stay generic.
    With ``request``, ``exc`` is left on its scope: the front's error log (``http.observe``)
    shows its traceback for a 5xx."""
    status, body = wire.error(exc)
    if request is not None:
        request.scope[FAULT] = exc
    elif status == 500:
        log.error("http: internal error: %s", exc, exc_info=exc)
    return JSONResponse(body, status_code=status)


def internal_error(exc: Exception, wire: Wire, request: Request) -> JSONResponse:
    """500 with the protocol's generic error body; the detail goes to the log (through the
    request's scope, ``http.observe``), never to the client."""
    request.scope[FAULT] = exc
    return JSONResponse(wire.internal_error, status_code=500)


def _trace_parent(headers: Mapping[str, str], tenant: str, workflow_id: str
                  ) -> otel_context.Context:
    """The caller's ``traceparent`` if sent, else the workflow's own trace (as over gRPC)."""
    ctx = incoming_context(list(headers.items()))
    if has_span(ctx) or not workflow_id:
        return ctx
    return workflow_context(f"{tenant}/{workflow_id}")


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the gateway's runtime owns SIGTERM and SIGINT."""

    def capture_signals(  # type: ignore[override]  # uvicorn's is its own generator's
            self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


class HttpFront:
    """OpenAI-compatible routes over one ``GatewayCore``; ``start`` binds, ``close`` stops."""

    def __init__(self, core: GatewayCore, auth: Authenticator, *, deadline_s: float,
                 tracer: Tracer, observe: Callable[[Answer], None] | None = None,
                 grace_s: float = 5.0, max_body_bytes: int | None = None,
                 limits: ConnectionLimits | None = None,
                 registry: CollectorRegistry | None = None) -> None:
        self.core = core
        self.auth = auth
        self.deadline_s = deadline_s
        self.tracer = tracer
        self.observe = observe
        self.grace_s = grace_s
        self.limits = limits or ConnectionLimits()
        # Room for the prompt's JSON escaping and the other fields of the body.
        self.max_body_bytes = max_body_bytes or 2 * core.limits.max_prompt_bytes + 65_536
        self.created = int(time.time())
        self.draining = False
        self.port: int | None = None
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._calls: set[asyncio.Task[Answer]] = set()
        #: Request counts and latencies by route, protocol, status and source (``http.observe``),
        #: in ``registry`` (the gateway's), else one of the front's own.
        self.metrics = HttpMetrics(registry or CollectorRegistry())
        self.starlette = Starlette(routes=[
            *(Route(w.endpoint.path, self._generator(w), methods=["POST"])
              for w in WIRES.values()),
            Route(f"{messages.MESSAGES.path}/count_tokens", self.count_tokens, methods=["POST"]),
            Route("/v1/models", self.list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", self.get_model, methods=["GET"]),
            Route("/healthz", self.healthz, methods=["GET"]),
        ], exception_handlers={HTTPException: self._http_error})
        self.app = Observed(self.starlette, self.metrics, self.starlette.routes)

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self, host: str, port: int) -> int:
        """Bind ``host:port`` (0 picks a free port) and serve; returns the bound port."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, port), family=family)  # OSError names the address
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, host=host, port=self.port, loop="none",
                                lifespan="off", log_level="warning", log_config=None,
                                access_log=False, ws="none",
                                http=bounded_protocol(self.limits),
                                timeout_keep_alive=self.limits.keepalive_timeout_s,  # type: ignore
                                # a backstop; uvicorn waits with it (typed int, takes a float)
                                timeout_graceful_shutdown=self.grace_s + 1.0)  # type: ignore[arg-type]
        self._server = _Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="http-front")
        while not self._server.started and not self._task.done():
            await asyncio.sleep(0.005)
        if self._task.done():
            self._task.result()  # raises what stopped it
            raise OSError(f"http front on {host}:{self.port} stopped at start")
        log.info("http front serving on %s:%d", host, self.port, extra={"http_port": self.port})
        return self.port

    async def close(self) -> None:
        """Stop accepting, let running requests finish within the grace period; idempotent."""
        self.draining = True
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self._task), self.grace_s)
        except TimeoutError:
            # Calls still running end as 503 (whole) or an inline error event (streams), so
            # every connection closes cleanly before uvicorn's own backstop cancels tasks.
            for call in list(self._calls):
                call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    # -- routes ---------------------------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        """Liveness and readiness: 503 once the gateway is shutting down."""
        if self.draining:
            return JSONResponse({"status": "draining"}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def list_models(self, request: Request) -> Response:
        """Models served by at least one engine."""
        try:
            self.auth.tenant(request.headers.get("authorization"))
        except DynbranchError as exc:
            return error_response(exc, request=request)
        data = [self._model(m) for m in sorted(self.core.models())]
        return JSONResponse({"object": "list", "data": data})

    async def get_model(self, request: Request) -> Response:
        """One served model, or 404 ``model_not_found``."""
        try:
            self.auth.tenant(request.headers.get("authorization"))
            model = request.path_params["model"]
            check_model(self.core, model)
        except DynbranchError as exc:
            return error_response(exc, request=request)
        return JSONResponse(self._model(model))

    def _generator(self, wire: Wire) -> Callable[[Request], Awaitable[Response]]:
        """The route of one wire's endpoint (``POST``; ``wires.WIRES``)."""
        async def generate(request: Request) -> Response:
            return await self._generate(request, wire)
        return generate

    async def count_tokens(self, request: Request) -> Response:
        """``POST /v1/messages/count_tokens``: the prompt tokens of the rendered conversation
        as the serving engine's tokenizer and chat template count them (a greedy one-token
        generation, untagged, so a repeated count is a library hit)."""
        wire = WIRES[messages.MESSAGES]
        try:
            tenant = self._tenant(request, wire)
            req = messages.parse_count(await self._read_json(request))
            demand = demand_of(self.core, tenant, req, {})
            answer = await unless_disconnected(self._call(demand, request), request)
        except ClientGone:
            return Response(status_code=499)
        except DynbranchError as exc:
            return error_response(exc, wire, request)
        except Exception as exc:  # the detail goes to the log, never to the client
            return internal_error(exc, wire, request)
        return JSONResponse({"input_tokens": answer.usage.prompt_tokens},
                            headers=self._headers(answer.source, answer.reuse_name,
                                                  "msg_" + demand.request_id))

    def _model(self, model: str) -> dict[str, Any]:
        return {"id": model, "object": "model", "created": self.created, "owned_by": "dynbranch"}

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        message = f"{request.method} {request.url.path}: {exc.detail}"
        if request.url.path.startswith(messages.MESSAGES.path):
            kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
            body = messages.error_body(kind, message)
        else:
            body = error_body(message, "invalid_request_error", None, None)
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    def _tenant(self, request: Request, wire: Wire) -> str:
        """The caller's tenant from its key: ``Authorization: Bearer``, or on Anthropic's
        routes ``x-api-key`` (what Anthropic's clients send)."""
        authorization = request.headers.get("authorization")
        key = request.headers.get("x-api-key", "").strip()
        if wire.endpoint.api_key_header and key and not authorization:
            authorization = f"Bearer {key}"
        return self.auth.tenant(authorization)

    # -- generation -----------------------------------------------------------------------------

    async def _generate(self, request: Request, wire: Wire) -> Response:
        try:
            tenant = self._tenant(request, wire)
            req = wire.parse(await self._read_json(request))
            demand = demand_of(self.core, tenant, req, request.headers)
            settle_from_history(self.core, demand, req)
            demands, picks = choice_demands(demand, req.n)
            if req.stream:
                return await self._stream(request, wire, req, demands, picks)
            calls = [self._call(d, request) for d in demands]
            done = await unless_disconnected(asyncio.gather(*calls), request)
            answers = [done[i] for i in picks]
        except ClientGone:
            return Response(status_code=499)  # nobody reads it; nginx's "client closed request"
        except DynbranchError as exc:
            return error_response(exc, wire, request)
        except Exception as exc:  # the detail goes to the log, never to the client
            return internal_error(exc, wire, request)
        rid = wire.endpoint.id_prefix + demand.request_id
        return JSONResponse(wire.body(req, rid, int(time.time()), answers),
                            headers=self._headers(answers[0].source, answers[0].reuse_name, rid))

    async def _read_json(self, request: Request) -> Any:
        """The body as JSON, read in chunks and refused once over ``max_body_bytes``."""
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            raise BodyTooLarge("body", f"larger than {self.max_body_bytes} bytes")
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > self.max_body_bytes:
                    raise BodyTooLarge("body", f"larger than {self.max_body_bytes} bytes")
                chunks.append(chunk)
        except ClientDisconnect:  # gone before its body arrived (or the body timed out)
            raise ClientGone from None
        return parse_json(b"".join(chunks))

    def _call(self, demand: Demand, request: Request,
              stream: TextStream | None = None) -> asyncio.Task[Answer]:
        parent = _trace_parent(request.headers, demand.tenant, demand.workflow_id)
        call = asyncio.create_task(self._traced(demand, parent, stream),
                                   name=f"http-call:{demand.request_id}")
        self._calls.add(call)
        call.add_done_callback(self._calls.discard)
        return call

    async def _traced(self, demand: Demand, parent: otel_context.Context,
                      stream: TextStream | None) -> Answer:
        with maybe_span(self.tracer, "gateway.call", context=parent, attributes={
                "dynbranch.request_id": demand.request_id, "dynbranch.edge": "http",
                "dynbranch.workflow_id": demand.workflow_id,
                "dynbranch.stage_id": demand.stage_id}) as span:
            answer = await self.core.call(demand, self.deadline_s, stream)
            span.set_attribute("dynbranch.source", answer.source.name.lower())
            span.set_attribute("dynbranch.engine_id", answer.engine_id)
        if self.observe is not None:
            self.observe(answer)
        return answer

    @staticmethod
    def _headers(source: AnswerSource, reuse_name: str, rid: str) -> dict[str, str]:
        headers = {HEADER_SOURCE: source.name.lower(), "x-request-id": rid}
        if reuse_name:
            headers[HEADER_REUSE_NAME] = reuse_name
        return headers

    # -- streaming ------------------------------------------------------------------------------

    async def _stream(self, request: Request, wire: Wire, req: Arrival, demands: list[Demand],
                      picks: list[int]) -> Response:
        """Wait for the first event of any choice, then stream; errors before it are ordinary
        error responses with their status. ``picks[i]``: the demand choice i reads."""
        queue: asyncio.Queue[Item] = asyncio.Queue()
        calls, streams = [], []
        for k, demand in enumerate(demands):
            indices = [i for i, pick in enumerate(picks) if pick == k]
            streams.append(TextStream(_feed(queue, indices)))
            call = self._call(demand, request, streams[-1])
            call.add_done_callback(_feed(queue, indices, done=True))  # after every delta
            calls.append(call)
        try:
            first = await unless_disconnected(asyncio.ensure_future(queue.get()), request)
            if first[1] is None:
                answer = outcome(calls[picks[first[0]]])  # raises the call's error
                source, name = answer.source, answer.reuse_name
            else:  # streamed text: the demand's own execution, or a fill it adopted
                source = streams[picks[first[0]]].source
                name = self._reuse_name(demands[picks[first[0]]])
        except BaseException:
            for call in calls:
                call.cancel()
            raise
        rid = req.endpoint.id_prefix + demands[0].request_id
        events = wire.events(req, rid, int(time.time()), first, queue, [calls[k] for k in picks])
        return CallStream(events, calls, self._headers(source, name, rid))

    def _reuse_name(self, demand: Demand) -> str:
        """The name an engine-streamed answer will carry (the core derives the same one)."""
        return self.core.reuse_name(demand)


def _feed(queue: asyncio.Queue[Item], indices: list[int], done: bool = False
          ) -> Callable[[Any], None]:
    """A call's delta sink (or done callback) that queues its events for every choice it
    serves."""
    def put(value: Any) -> None:
        for index in indices:
            queue.put_nowait((index, None if done else value))
    return put


def choice_demands(demand: Demand, n: int) -> tuple[list[Demand], list[int]]:
    """The demands that answer ``n`` choices and which demand each choice reads. Greedy
    choices are identical, so one demand serves all; seeded choice i samples with seed + i
    (distinct and reproducible, so each is reused exactly); unseeded ones are independent."""
    sampling = demand.sampling
    if n == 1 or sampling is None or sampling.temperature == 0.0:
        return [demand], [0] * n
    demands = [demand]
    for i in range(1, n):
        seed = None if sampling.seed is None else (sampling.seed + i) % (MAX_SEED + 1)
        demands.append(dataclasses.replace(demand, request_id=new_request_id(),
                                           sampling=dataclasses.replace(sampling, seed=seed)))
    return demands, list(range(n))


__all__ = ["HEADER_REUSE_NAME", "HEADER_SOURCE", "HEADER_STAGE", "TAG_HEADERS", "HttpFront",
           "error_response"]
