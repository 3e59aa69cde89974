"""The gateway's OpenAI-compatible HTTP front (DESIGN.md §3 gateway): an edge, like the servicer.

Routes: ``POST /v1/chat/completions`` and ``POST /v1/completions`` (JSON, or server-sent events
with ``stream: true``), ``GET /v1/models`` and ``GET /v1/models/{id}``, and ``GET /healthz``.
A starlette app served by uvicorn inside the gateway's own event loop: :meth:`HttpFront.start`
binds the port, :meth:`HttpFront.close` stops it (idempotent).

Every request becomes one core ``Demand``. The tenant comes only from the bearer key (a
tenant-like header a caller sets is never read); workflow tags come from ``x-dynbranch-*``
headers (``x-dynbranch-stage: template/stage`` names a template stage); the prompt is the
completion prompt or the rendered chat messages (``http.schema``, ``http.chat``); a chat request
with tools or a JSON response format also carries its chat spec to the engine. ``n`` choices are
one demand each (greedy choices share one). A tagged request offers its tools as candidates, and
one whose conversation ends in a function's results settles the workflow's branches with that
function. Answers carry ``x-dynbranch-source`` (engine, library, promoted_fill, joined) and
``x-dynbranch-reuse-name``. Errors use OpenAI's error object and status codes. A client that goes
away cancels its call, and the cancellation aborts the engine work.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import socket
import time
from collections.abc import Callable, Mapping
from typing import Any

import uvicorn
from opentelemetry import context as otel_context
from opentelemetry.trace import Tracer
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from services.common.values.errors import DynbranchError, InvalidArgument
from services.common.values.tracing import has_span, incoming_context, maybe_span, workflow_context
from services.gateway.auth import Authenticator
from services.gateway.core import GatewayCore
from services.gateway.http.bodies import (
    INTERNAL_ERROR,
    BodyTooLarge,
    ModelNotFound,
    error_body,
    error_status,
    response_body,
)
from services.gateway.http.schema import MAX_SEED, ApiRequest, Endpoint, parse_request
from services.gateway.http.stream import (
    CallStream,
    ClientGone,
    Item,
    outcome,
    sse_events,
    unless_disconnected,
)
from services.gateway.templates import Stage, StageKind
from services.gateway.values import Answer, AnswerSource, Demand, new_request_id

log = logging.getLogger(__name__)

HEADER_SOURCE = "x-dynbranch-source"
HEADER_REUSE_NAME = "x-dynbranch-reuse-name"
HEADER_STAGE = "x-dynbranch-stage"
#: Workflow-tag headers and the ``Demand`` fields they fill.
TAG_HEADERS = {"x-dynbranch-workflow-type": "workflow_type",
               "x-dynbranch-workflow-id": "workflow_id", "x-dynbranch-agent-id": "agent_id"}
MAX_TAG_CHARS = 256


def error_response(exc: DynbranchError, chat: bool = False) -> JSONResponse:
    """OpenAI's error JSON with the status for ``exc``; internal errors stay generic."""
    status, body = error_status(exc, chat)
    if status == 500:
        log.error("http: internal error: %s", exc, exc_info=exc)
    return JSONResponse(body, status_code=status)


def _trace_parent(headers: Mapping[str, str], tenant: str, workflow_id: str
                  ) -> otel_context.Context:
    """The caller's ``traceparent`` if sent, else the workflow's own trace (as over gRPC)."""
    ctx = incoming_context(list(headers.items()))
    if has_span(ctx) or not workflow_id:
        return ctx
    return workflow_context(f"{tenant}/{workflow_id}")


class _Server(uvicorn.Server):
    """uvicorn without its signal handlers: the gateway's runtime owns SIGTERM and SIGINT."""

    def capture_signals(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


class HttpFront:
    """OpenAI-compatible routes over one ``GatewayCore``; ``start`` binds, ``close`` stops."""

    def __init__(self, core: GatewayCore, auth: Authenticator, *, deadline_s: float,
                 tracer: Tracer, observe: Callable[[Answer], None] | None = None,
                 grace_s: float = 5.0, max_body_bytes: int | None = None) -> None:
        self.core = core
        self.auth = auth
        self.deadline_s = deadline_s
        self.tracer = tracer
        self.observe = observe
        self.grace_s = grace_s
        # Room for the prompt's JSON escaping and the other fields of the body.
        self.max_body_bytes = max_body_bytes or 2 * core.limits.max_prompt_bytes + 65_536
        self.created = int(time.time())
        self.draining = False
        self.port: int | None = None
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._calls: set[asyncio.Task[Answer]] = set()
        self.app = Starlette(routes=[
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/models", self.list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", self.get_model, methods=["GET"]),
            Route("/healthz", self.healthz, methods=["GET"]),
        ], exception_handlers={HTTPException: self._http_error})

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self, host: str, port: int) -> int:
        """Bind ``host:port`` (0 picks a free port) and serve; returns the bound port."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.create_server((host, port), family=family)  # OSError names the address
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, host=host, port=self.port, loop="none",
                                lifespan="off", log_level="warning", log_config=None,
                                access_log=False, ws="none",
                                timeout_graceful_shutdown=self.grace_s + 1.0)  # backstop
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
            return error_response(exc)
        data = [self._model(m) for m in sorted(self.core.models())]
        return JSONResponse({"object": "list", "data": data})

    async def get_model(self, request: Request) -> Response:
        """One served model, or 404 ``model_not_found``."""
        try:
            self.auth.tenant(request.headers.get("authorization"))
            model = request.path_params["model"]
            self._check_model(model)
        except DynbranchError as exc:
            return error_response(exc)
        return JSONResponse(self._model(model))

    async def chat_completions(self, request: Request) -> Response:
        """``POST /v1/chat/completions``."""
        return await self._generate(request, Endpoint.CHAT)

    async def completions(self, request: Request) -> Response:
        """``POST /v1/completions``."""
        return await self._generate(request, Endpoint.COMPLETION)

    def _model(self, model: str) -> dict[str, Any]:
        return {"id": model, "object": "model", "created": self.created, "owned_by": "dynbranch"}

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        body = error_body(f"{request.method} {request.url.path}: {exc.detail}",
                          "invalid_request_error", None, None)
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    # -- generation -----------------------------------------------------------------------------

    async def _generate(self, request: Request, endpoint: Endpoint) -> Response:
        try:
            tenant = self.auth.tenant(request.headers.get("authorization"))
            req = parse_request(await self._read_json(request), endpoint)
            demand = self._demand(tenant, req, request.headers)
            self._settle_from_history(demand, req)
            demands, picks = choice_demands(demand, req.n)
            if req.stream:
                return await self._stream(request, req, demands, picks)
            calls = [self._call(d, request) for d in demands]
            done = await unless_disconnected(asyncio.gather(*calls), request)
            answers = [done[i] for i in picks]
        except ClientGone:
            return Response(status_code=499)  # nobody reads it; nginx's "client closed request"
        except DynbranchError as exc:
            return error_response(exc, endpoint is Endpoint.CHAT)
        except Exception:  # the detail goes to the log, never to the client
            log.exception("http: unexpected error on %s", request.url.path)
            return JSONResponse(INTERNAL_ERROR, status_code=500)
        rid = endpoint.id_prefix + demand.request_id
        return JSONResponse(response_body(req, rid, int(time.time()), answers),
                            headers=self._headers(answers[0].source, answers[0].reuse_name, rid))

    async def _read_json(self, request: Request) -> Any:
        """The body as JSON, read in chunks and refused once over ``max_body_bytes``."""
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            raise BodyTooLarge("body", f"larger than {self.max_body_bytes} bytes")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body_bytes:
                raise BodyTooLarge("body", f"larger than {self.max_body_bytes} bytes")
            chunks.append(chunk)
        try:
            return json.loads(b"".join(chunks))
        except ValueError:  # also UnicodeDecodeError
            raise InvalidArgument("body", "not valid JSON") from None

    def _demand(self, tenant: str, req: ApiRequest, headers: Mapping[str, str]) -> Demand:
        """The core demand of one request; a tool stage takes no model or sampling."""
        tags = {field: self._tag(headers, name) for name, field in TAG_HEADERS.items()}
        template_id, stage_id, stage = self._stage(self._tag(headers, HEADER_STAGE))
        is_tool = stage is not None and stage.kind is StageKind.TOOL
        if not is_tool:
            self._check_model(req.model)
        sampling = None if is_tool else req.sampling(self.core.max_tokens_limit(req.model))
        if template_id and not tags["workflow_type"]:
            tags["workflow_type"] = template_id
        ctx, chat = req.context, req.conversation
        if req.n > 1 and stage is not None:
            raise InvalidArgument("n", f"must be 1 on a tagged stage ({HEADER_STAGE}), got "
                                       f"{req.n}")
        # A tool-calling decision offers its tools; a tool result is the latest observation.
        offered = ctx.offered or (req.chat_spec.tool_names() if req.chat_spec else ())
        observation = ctx.observation or (chat.last_tool_result if chat else "")
        return Demand(tenant=tenant, request_id=new_request_id(), model=req.model,
                      prompt=req.prompt, sampling=sampling, template_id=template_id,
                      stage_id=stage_id, stage_version=stage.version if stage else 0,
                      inputs=ctx.inputs, outputs=ctx.outputs, offered=offered,
                      observation=observation, chat=req.chat_spec, stage=stage, **tags)

    def _settle_from_history(self, demand: Demand, req: ApiRequest) -> None:
        """A tagged request whose conversation ends in the results of one function's calls
        says which tool the last decision chose: settle the workflow's open branches at its
        template's offered decision points with that function, as ``Settle`` does."""
        called = set(req.conversation.last_called) if req.conversation else set()
        if len(called) != 1 or not demand.tagged or not demand.workflow_id:
            return
        selected = called.pop()
        for point in self.core.decisions(demand.template_id):
            if point.offered:
                self.core.settle(demand.tenant, demand.workflow_id, point.coordinate, selected)

    @staticmethod
    def _tag(headers: Mapping[str, str], name: str) -> str:
        value = headers.get(name, "").strip()
        if len(value) > MAX_TAG_CHARS:
            raise InvalidArgument(name, f"at most {MAX_TAG_CHARS} characters")
        return value

    def _stage(self, value: str) -> tuple[str, str, Stage | None]:
        """``template/stage`` → its ids and registered stage; NotFound names what is missing."""
        if not value:
            return "", "", None
        template_id, _, stage_id = value.partition("/")
        if not template_id or not stage_id:
            raise InvalidArgument(HEADER_STAGE, f"expected 'template_id/stage_id', got {value!r}")
        return template_id, stage_id, self.core.stage(template_id, stage_id)

    def _check_model(self, model: str) -> None:
        if not model:
            raise InvalidArgument("model", "required")
        served = self.core.models()
        if model not in served:
            known = ", ".join(sorted(served)) or "none"
            raise ModelNotFound(f"The model {model!r} does not exist (served: {known})")

    def _call(self, demand: Demand, request: Request,
              on_delta: Callable[[str], None] | None = None) -> asyncio.Task[Answer]:
        parent = _trace_parent(request.headers, demand.tenant, demand.workflow_id)
        call = asyncio.create_task(self._traced(demand, parent, on_delta),
                                   name=f"http-call:{demand.request_id}")
        self._calls.add(call)
        call.add_done_callback(self._calls.discard)
        return call

    async def _traced(self, demand: Demand, parent: otel_context.Context,
                      on_delta: Callable[[str], None] | None) -> Answer:
        with maybe_span(self.tracer, "gateway.call", context=parent, attributes={
                "dynbranch.request_id": demand.request_id, "dynbranch.edge": "http",
                "dynbranch.workflow_id": demand.workflow_id,
                "dynbranch.stage_id": demand.stage_id}) as span:
            answer = await self.core.call(demand, self.deadline_s, on_delta)
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

    async def _stream(self, request: Request, req: ApiRequest, demands: list[Demand],
                      picks: list[int]) -> Response:
        """Wait for the first event of any choice, then stream; errors before it are ordinary
        error responses with their status. ``picks[i]``: the demand choice i reads."""
        queue: asyncio.Queue[Item] = asyncio.Queue()
        calls = []
        for k, demand in enumerate(demands):
            indices = [i for i, pick in enumerate(picks) if pick == k]
            call = self._call(demand, request, _feed(queue, indices))
            call.add_done_callback(_feed(queue, indices, done=True))  # after every delta
            calls.append(call)
        try:
            first = await unless_disconnected(asyncio.ensure_future(queue.get()), request)
            if first[1] is None:
                answer = outcome(calls[picks[first[0]]])  # raises the call's error
                source, name = answer.source, answer.reuse_name
            else:
                source, name = AnswerSource.ENGINE, self._reuse_name(demands[picks[first[0]]])
        except BaseException:
            for call in calls:
                call.cancel()
            raise
        rid = req.endpoint.id_prefix + demands[0].request_id
        events = sse_events(req, rid, int(time.time()), first, queue, [calls[k] for k in picks])
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
