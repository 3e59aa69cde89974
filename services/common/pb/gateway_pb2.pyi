from services.common.pb import common_pb2 as _common_pb2
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ResultSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESULT_SOURCE_UNSPECIFIED: _ClassVar[ResultSource]
    RESULT_SOURCE_ENGINE: _ClassVar[ResultSource]
    RESULT_SOURCE_LIBRARY: _ClassVar[ResultSource]
    RESULT_SOURCE_PROMOTED_FILL: _ClassVar[ResultSource]
RESULT_SOURCE_UNSPECIFIED: ResultSource
RESULT_SOURCE_ENGINE: ResultSource
RESULT_SOURCE_LIBRARY: ResultSource
RESULT_SOURCE_PROMOTED_FILL: ResultSource

class CallRequest(_message.Message):
    __slots__ = ("demand",)
    DEMAND_FIELD_NUMBER: _ClassVar[int]
    demand: _common_pb2.StageDemand
    def __init__(self, demand: _Optional[_Union[_common_pb2.StageDemand, _Mapping]] = ...) -> None: ...

class CallResponse(_message.Message):
    __slots__ = ("request_id", "text", "finish_reason", "usage", "timings", "engine_id", "source", "gateway_s")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    GATEWAY_S_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    text: str
    finish_reason: _common_pb2.FinishReason
    usage: _common_pb2.Usage
    timings: _common_pb2.Timings
    engine_id: str
    source: ResultSource
    gateway_s: float
    def __init__(self, request_id: _Optional[str] = ..., text: _Optional[str] = ..., finish_reason: _Optional[_Union[_common_pb2.FinishReason, str]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., timings: _Optional[_Union[_common_pb2.Timings, _Mapping]] = ..., engine_id: _Optional[str] = ..., source: _Optional[_Union[ResultSource, str]] = ..., gateway_s: _Optional[float] = ...) -> None: ...
