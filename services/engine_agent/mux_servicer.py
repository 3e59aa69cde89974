"""The server side of GenerateMux: answer-only generations multiplexed on one stream.

A unary gateway call needs only a generation's answer; as a Generate call of its own it pays a
call's setup on both sides. One session (``services.common.runtime.mux_session``) runs the
generations its stream starts as owned tasks and queues exactly one result per start.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import grpc
from opentelemetry import context as otel_context

from services.common.pb import common_pb2, engine_pb2
from services.common.runtime import mux_session
from services.common.values.generation import GenerationRequest

METHOD = "/dynbranch.v1.EngineAgent/GenerateMux"
#: Validates a start message's generation (the servicer's own check, as Generate runs it).
Validate = Callable[[engine_pb2.GenerateRequest], GenerationRequest]
#: Runs one generation to its end: its Finished message.
Answer = Callable[[GenerationRequest, otel_context.Context], Awaitable[engine_pb2.Finished]]


class GenerationSession(mux_session.MuxSession[str, GenerationRequest]):
    """One GenerateMux stream's generations, keyed by request id; ``close`` cancels every one
    still running."""

    method = METHOD
    noun = "generation"

    def __init__(self, validate: Validate, answer: Answer, max_running: int) -> None:
        super().__init__(max_running)
        self._validate = validate
        self._answer = answer

    def starts(self, message: engine_pb2.GenerateMuxRequest) -> Iterable[engine_pb2.MuxStart]:
        starts: Iterable[engine_pb2.MuxStart] = message.starts
        return starts

    def cancels(self, message: engine_pb2.GenerateMuxRequest) -> Iterable[str]:
        cancels: Iterable[str] = message.cancels
        return cancels

    def key(self, start: engine_pb2.MuxStart) -> str:
        return start.request.request_id

    def admit(self, start: engine_pb2.MuxStart) -> GenerationRequest:
        return self._validate(start.request)

    def run(self, work: GenerationRequest, trace: otel_context.Context
            ) -> Awaitable[engine_pb2.Finished]:
        return self._answer(work, trace)

    def answered(self, key: str, answer: engine_pb2.Finished) -> engine_pb2.GenerateMuxResult:
        return engine_pb2.GenerateMuxResult(request_id=key, finished=answer)

    def refused(self, key: str, code: grpc.StatusCode, message: str
                ) -> engine_pb2.GenerateMuxResult:
        return engine_pb2.GenerateMuxResult(
            request_id=key, error=common_pb2.MuxError(code=code.value[0], message=message))

    def response(self, results: list[engine_pb2.GenerateMuxResult]
                 ) -> engine_pb2.GenerateMuxResponse:
        return engine_pb2.GenerateMuxResponse(results=results)


__all__ = ["GenerationSession"]
