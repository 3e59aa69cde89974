from services.common.pb import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ToolStartedRequest(_message.Message):
    __slots__ = ("key", "history", "tool")
    KEY_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.ResultKey
    history: str
    tool: str
    def __init__(self, key: _Optional[_Union[_common_pb2.ResultKey, _Mapping]] = ..., history: _Optional[str] = ..., tool: _Optional[str] = ...) -> None: ...

class ToolStartedResponse(_message.Message):
    __slots__ = ("pinned",)
    PINNED_FIELD_NUMBER: _ClassVar[int]
    pinned: bool
    def __init__(self, pinned: _Optional[bool] = ...) -> None: ...

class ResultReadyRequest(_message.Message):
    __slots__ = ("key", "history", "payload_digest")
    KEY_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_DIGEST_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.ResultKey
    history: str
    payload_digest: str
    def __init__(self, key: _Optional[_Union[_common_pb2.ResultKey, _Mapping]] = ..., history: _Optional[str] = ..., payload_digest: _Optional[str] = ...) -> None: ...

class ResultDescriptor(_message.Message):
    __slots__ = ("key", "resident_blocks", "resident_tokens", "prefix_digest", "lease")
    KEY_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_DIGEST_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.ResultKey
    resident_blocks: int
    resident_tokens: int
    prefix_digest: str
    lease: _common_pb2.LeaseRecord
    def __init__(self, key: _Optional[_Union[_common_pb2.ResultKey, _Mapping]] = ..., resident_blocks: _Optional[int] = ..., resident_tokens: _Optional[int] = ..., prefix_digest: _Optional[str] = ..., lease: _Optional[_Union[_common_pb2.LeaseRecord, _Mapping]] = ...) -> None: ...

class ReceiveResultRequest(_message.Message):
    __slots__ = ("key", "payload_digest", "prefix_digest", "continuation")
    KEY_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_DIGEST_FIELD_NUMBER: _ClassVar[int]
    PREFIX_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CONTINUATION_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.ResultKey
    payload_digest: str
    prefix_digest: str
    continuation: GenerateRequest
    def __init__(self, key: _Optional[_Union[_common_pb2.ResultKey, _Mapping]] = ..., payload_digest: _Optional[str] = ..., prefix_digest: _Optional[str] = ..., continuation: _Optional[_Union[GenerateRequest, _Mapping]] = ...) -> None: ...

class ReceiveResultResponse(_message.Message):
    __slots__ = ("finished", "bound", "receipt_to_allocation_s")
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    BOUND_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_TO_ALLOCATION_S_FIELD_NUMBER: _ClassVar[int]
    finished: Finished
    bound: bool
    receipt_to_allocation_s: float
    def __init__(self, finished: _Optional[_Union[Finished, _Mapping]] = ..., bound: _Optional[bool] = ..., receipt_to_allocation_s: _Optional[float] = ...) -> None: ...

class WithdrawResultRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.ResultKey
    def __init__(self, key: _Optional[_Union[_common_pb2.ResultKey, _Mapping]] = ...) -> None: ...

class WithdrawResultResponse(_message.Message):
    __slots__ = ("withdrawn",)
    WITHDRAWN_FIELD_NUMBER: _ClassVar[int]
    withdrawn: bool
    def __init__(self, withdrawn: _Optional[bool] = ...) -> None: ...

class SyncInventoryResponse(_message.Message):
    __slots__ = ("accepted",)
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    def __init__(self, accepted: _Optional[bool] = ...) -> None: ...

class WatchLeasesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LeaseUpdate(_message.Message):
    __slots__ = ("budget", "lease")
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    budget: _common_pb2.BudgetRecord
    lease: _common_pb2.LeaseRecord
    def __init__(self, budget: _Optional[_Union[_common_pb2.BudgetRecord, _Mapping]] = ..., lease: _Optional[_Union[_common_pb2.LeaseRecord, _Mapping]] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("request_id", "model", "prompt", "sampling", "priority", "final_only", "chat")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    FINAL_ONLY_FIELD_NUMBER: _ClassVar[int]
    CHAT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    prompt: str
    sampling: _common_pb2.SamplingParams
    priority: _common_pb2.PriorityClass
    final_only: bool
    chat: _common_pb2.ChatSpec
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., prompt: _Optional[str] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., priority: _Optional[_Union[_common_pb2.PriorityClass, str]] = ..., final_only: _Optional[bool] = ..., chat: _Optional[_Union[_common_pb2.ChatSpec, _Mapping]] = ...) -> None: ...

class Queued(_message.Message):
    __slots__ = ("prompt_tokens", "queue_position")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_POSITION_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    queue_position: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., queue_position: _Optional[int] = ...) -> None: ...

class Allocated(_message.Message):
    __slots__ = ("cached_prompt_tokens", "queue_s")
    CACHED_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_S_FIELD_NUMBER: _ClassVar[int]
    cached_prompt_tokens: int
    queue_s: float
    def __init__(self, cached_prompt_tokens: _Optional[int] = ..., queue_s: _Optional[float] = ...) -> None: ...

class TokenDelta(_message.Message):
    __slots__ = ("text", "tokens")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    text: str
    tokens: int
    def __init__(self, text: _Optional[str] = ..., tokens: _Optional[int] = ...) -> None: ...

class Finished(_message.Message):
    __slots__ = ("reason", "usage", "timings", "text", "tool_calls", "stop_string")
    REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    STOP_STRING_FIELD_NUMBER: _ClassVar[int]
    reason: _common_pb2.FinishReason
    usage: _common_pb2.Usage
    timings: _common_pb2.Timings
    text: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[_common_pb2.ToolCall]
    stop_string: str
    def __init__(self, reason: _Optional[_Union[_common_pb2.FinishReason, str]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., timings: _Optional[_Union[_common_pb2.Timings, _Mapping]] = ..., text: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[_common_pb2.ToolCall, _Mapping]]] = ..., stop_string: _Optional[str] = ...) -> None: ...

class GenerateEvent(_message.Message):
    __slots__ = ("request_id", "sequence", "queued", "allocated", "delta", "finished")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    sequence: int
    queued: Queued
    allocated: Allocated
    delta: TokenDelta
    finished: Finished
    def __init__(self, request_id: _Optional[str] = ..., sequence: _Optional[int] = ..., queued: _Optional[_Union[Queued, _Mapping]] = ..., allocated: _Optional[_Union[Allocated, _Mapping]] = ..., delta: _Optional[_Union[TokenDelta, _Mapping]] = ..., finished: _Optional[_Union[Finished, _Mapping]] = ...) -> None: ...

class GenerateMuxRequest(_message.Message):
    __slots__ = ("starts", "cancels")
    STARTS_FIELD_NUMBER: _ClassVar[int]
    CANCELS_FIELD_NUMBER: _ClassVar[int]
    starts: _containers.RepeatedCompositeFieldContainer[MuxStart]
    cancels: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, starts: _Optional[_Iterable[_Union[MuxStart, _Mapping]]] = ..., cancels: _Optional[_Iterable[str]] = ...) -> None: ...

class MuxStart(_message.Message):
    __slots__ = ("request", "timeout_s", "trace_context")
    class TraceContextEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    request: GenerateRequest
    timeout_s: float
    trace_context: _containers.ScalarMap[str, str]
    def __init__(self, request: _Optional[_Union[GenerateRequest, _Mapping]] = ..., timeout_s: _Optional[float] = ..., trace_context: _Optional[_Mapping[str, str]] = ...) -> None: ...

class GenerateMuxResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[GenerateMuxResult]
    def __init__(self, results: _Optional[_Iterable[_Union[GenerateMuxResult, _Mapping]]] = ...) -> None: ...

class GenerateMuxResult(_message.Message):
    __slots__ = ("request_id", "finished", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    finished: Finished
    error: _common_pb2.MuxError
    def __init__(self, request_id: _Optional[str] = ..., finished: _Optional[_Union[Finished, _Mapping]] = ..., error: _Optional[_Union[_common_pb2.MuxError, _Mapping]] = ...) -> None: ...

class AbortRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class AbortResponse(_message.Message):
    __slots__ = ("aborted",)
    ABORTED_FIELD_NUMBER: _ClassVar[int]
    aborted: bool
    def __init__(self, aborted: _Optional[bool] = ...) -> None: ...

class AdoptRequest(_message.Message):
    __slots__ = ("request_id", "text")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    text: bool
    def __init__(self, request_id: _Optional[str] = ..., text: _Optional[bool] = ...) -> None: ...

class AdoptEvent(_message.Message):
    __slots__ = ("text", "tokens", "allocated", "raised", "finished")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    RAISED_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    text: str
    tokens: int
    allocated: bool
    raised: bool
    finished: bool
    def __init__(self, text: _Optional[str] = ..., tokens: _Optional[int] = ..., allocated: _Optional[bool] = ..., raised: _Optional[bool] = ..., finished: _Optional[bool] = ...) -> None: ...

class WatchLoadRequest(_message.Message):
    __slots__ = ("interval_s",)
    INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    interval_s: float
    def __init__(self, interval_s: _Optional[float] = ...) -> None: ...

class LookupPrefixRequest(_message.Message):
    __slots__ = ("prompt",)
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    prompt: str
    def __init__(self, prompt: _Optional[str] = ...) -> None: ...

class LookupPrefixResponse(_message.Message):
    __slots__ = ("prompt_tokens", "resident_tokens", "block_size")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    resident_tokens: int
    block_size: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., resident_tokens: _Optional[int] = ..., block_size: _Optional[int] = ...) -> None: ...

class GetInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EngineInfo(_message.Message):
    __slots__ = ("engine_id", "model", "backend", "max_model_len", "block_size", "kv_blocks_total", "max_running", "leases_supported", "simulated")
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNNING_FIELD_NUMBER: _ClassVar[int]
    LEASES_SUPPORTED_FIELD_NUMBER: _ClassVar[int]
    SIMULATED_FIELD_NUMBER: _ClassVar[int]
    engine_id: str
    model: str
    backend: str
    max_model_len: int
    block_size: int
    kv_blocks_total: int
    max_running: int
    leases_supported: bool
    simulated: bool
    def __init__(self, engine_id: _Optional[str] = ..., model: _Optional[str] = ..., backend: _Optional[str] = ..., max_model_len: _Optional[int] = ..., block_size: _Optional[int] = ..., kv_blocks_total: _Optional[int] = ..., max_running: _Optional[int] = ..., leases_supported: _Optional[bool] = ..., simulated: _Optional[bool] = ...) -> None: ...
