from services.common.pb import common_pb2 as _common_pb2
from services.common.pb import delivery_pb2 as _delivery_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ResultSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESULT_SOURCE_UNSPECIFIED: _ClassVar[ResultSource]
    RESULT_SOURCE_ENGINE: _ClassVar[ResultSource]
    RESULT_SOURCE_LIBRARY: _ClassVar[ResultSource]
    RESULT_SOURCE_PROMOTED_FILL: _ClassVar[ResultSource]
    RESULT_SOURCE_JOINED: _ClassVar[ResultSource]
RESULT_SOURCE_UNSPECIFIED: ResultSource
RESULT_SOURCE_ENGINE: ResultSource
RESULT_SOURCE_LIBRARY: ResultSource
RESULT_SOURCE_PROMOTED_FILL: ResultSource
RESULT_SOURCE_JOINED: ResultSource

class RegisterTemplateRequest(_message.Message):
    __slots__ = ("yaml",)
    YAML_FIELD_NUMBER: _ClassVar[int]
    yaml: str
    def __init__(self, yaml: _Optional[str] = ...) -> None: ...

class RegisterTemplateResponse(_message.Message):
    __slots__ = ("template_id", "version", "coordinates")
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    COORDINATES_FIELD_NUMBER: _ClassVar[int]
    template_id: str
    version: int
    coordinates: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, template_id: _Optional[str] = ..., version: _Optional[int] = ..., coordinates: _Optional[_Iterable[str]] = ...) -> None: ...

class Document(_message.Message):
    __slots__ = ("doc_id", "title", "text")
    DOC_ID_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    doc_id: str
    title: str
    text: str
    def __init__(self, doc_id: _Optional[str] = ..., title: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class GatewayWriteRequest(_message.Message):
    __slots__ = ("upserts", "removals", "record_ids")
    UPSERTS_FIELD_NUMBER: _ClassVar[int]
    REMOVALS_FIELD_NUMBER: _ClassVar[int]
    RECORD_IDS_FIELD_NUMBER: _ClassVar[int]
    upserts: _containers.RepeatedCompositeFieldContainer[Document]
    removals: _containers.RepeatedScalarFieldContainer[str]
    record_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, upserts: _Optional[_Iterable[_Union[Document, _Mapping]]] = ..., removals: _Optional[_Iterable[str]] = ..., record_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class GatewayWriteResponse(_message.Message):
    __slots__ = ("versions",)
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedCompositeFieldContainer[_common_pb2.RecordVersion]
    def __init__(self, versions: _Optional[_Iterable[_Union[_common_pb2.RecordVersion, _Mapping]]] = ...) -> None: ...

class SettleBranchRequest(_message.Message):
    __slots__ = ("workflow_id", "coordinate", "selected")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    COORDINATE_FIELD_NUMBER: _ClassVar[int]
    SELECTED_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    coordinate: str
    selected: str
    def __init__(self, workflow_id: _Optional[str] = ..., coordinate: _Optional[str] = ..., selected: _Optional[str] = ...) -> None: ...

class SettleBranchResponse(_message.Message):
    __slots__ = ("settled",)
    SETTLED_FIELD_NUMBER: _ClassVar[int]
    settled: int
    def __init__(self, settled: _Optional[int] = ...) -> None: ...

class CallRequest(_message.Message):
    __slots__ = ("demand",)
    DEMAND_FIELD_NUMBER: _ClassVar[int]
    demand: _common_pb2.StageDemand
    def __init__(self, demand: _Optional[_Union[_common_pb2.StageDemand, _Mapping]] = ...) -> None: ...

class CallMuxRequest(_message.Message):
    __slots__ = ("starts", "cancels")
    STARTS_FIELD_NUMBER: _ClassVar[int]
    CANCELS_FIELD_NUMBER: _ClassVar[int]
    starts: _containers.RepeatedCompositeFieldContainer[CallMuxStart]
    cancels: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, starts: _Optional[_Iterable[_Union[CallMuxStart, _Mapping]]] = ..., cancels: _Optional[_Iterable[int]] = ...) -> None: ...

class CallMuxStart(_message.Message):
    __slots__ = ("call_id", "request", "timeout_s", "trace_context")
    class TraceContextEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    request: CallRequest
    timeout_s: float
    trace_context: _containers.ScalarMap[str, str]
    def __init__(self, call_id: _Optional[int] = ..., request: _Optional[_Union[CallRequest, _Mapping]] = ..., timeout_s: _Optional[float] = ..., trace_context: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CallMuxResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CallMuxResult]
    def __init__(self, results: _Optional[_Iterable[_Union[CallMuxResult, _Mapping]]] = ...) -> None: ...

class CallMuxResult(_message.Message):
    __slots__ = ("call_id", "answer", "error")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    answer: CallResponse
    error: _common_pb2.MuxError
    def __init__(self, call_id: _Optional[int] = ..., answer: _Optional[_Union[CallResponse, _Mapping]] = ..., error: _Optional[_Union[_common_pb2.MuxError, _Mapping]] = ...) -> None: ...

class CallEvent(_message.Message):
    __slots__ = ("delta", "answer")
    DELTA_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    delta: CallDelta
    answer: CallResponse
    def __init__(self, delta: _Optional[_Union[CallDelta, _Mapping]] = ..., answer: _Optional[_Union[CallResponse, _Mapping]] = ...) -> None: ...

class CallDelta(_message.Message):
    __slots__ = ("text", "source")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    text: str
    source: ResultSource
    def __init__(self, text: _Optional[str] = ..., source: _Optional[_Union[ResultSource, str]] = ...) -> None: ...

class CallResponse(_message.Message):
    __slots__ = ("request_id", "text", "finish_reason", "usage", "timings", "engine_id", "source", "gateway_s", "reuse_name", "waited_s")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    GATEWAY_S_FIELD_NUMBER: _ClassVar[int]
    REUSE_NAME_FIELD_NUMBER: _ClassVar[int]
    WAITED_S_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    text: str
    finish_reason: _common_pb2.FinishReason
    usage: _common_pb2.Usage
    timings: _common_pb2.Timings
    engine_id: str
    source: ResultSource
    gateway_s: float
    reuse_name: str
    waited_s: float
    def __init__(self, request_id: _Optional[str] = ..., text: _Optional[str] = ..., finish_reason: _Optional[_Union[_common_pb2.FinishReason, str]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., timings: _Optional[_Union[_common_pb2.Timings, _Mapping]] = ..., engine_id: _Optional[str] = ..., source: _Optional[_Union[ResultSource, str]] = ..., gateway_s: _Optional[float] = ..., reuse_name: _Optional[str] = ..., waited_s: _Optional[float] = ...) -> None: ...
