from services.common.pb import common_pb2 as _common_pb2
from services.common.pb import engine_pb2 as _engine_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StartToolRequest(_message.Message):
    __slots__ = ("key", "engine_id", "history", "tool")
    KEY_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.ResultKey
    engine_id: str
    history: str
    tool: str
    def __init__(self, key: _Optional[_Union[_common_pb2.ResultKey, _Mapping]] = ..., engine_id: _Optional[str] = ..., history: _Optional[str] = ..., tool: _Optional[str] = ...) -> None: ...

class StartToolResponse(_message.Message):
    __slots__ = ("pinned",)
    PINNED_FIELD_NUMBER: _ClassVar[int]
    pinned: bool
    def __init__(self, pinned: _Optional[bool] = ...) -> None: ...

class DeliverRequest(_message.Message):
    __slots__ = ("key", "engine_id", "history", "observation", "tool", "prompt", "model", "sampling")
    KEY_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.ResultKey
    engine_id: str
    history: str
    observation: bytes
    tool: str
    prompt: str
    model: str
    sampling: _common_pb2.SamplingParams
    def __init__(self, key: _Optional[_Union[_common_pb2.ResultKey, _Mapping]] = ..., engine_id: _Optional[str] = ..., history: _Optional[str] = ..., observation: _Optional[bytes] = ..., tool: _Optional[str] = ..., prompt: _Optional[str] = ..., model: _Optional[str] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ...) -> None: ...

class DeliverResponse(_message.Message):
    __slots__ = ("finished", "engine_id", "sender_wait_s", "transfer_s", "receipt_to_allocation_s", "promoted")
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_WAIT_S_FIELD_NUMBER: _ClassVar[int]
    TRANSFER_S_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_TO_ALLOCATION_S_FIELD_NUMBER: _ClassVar[int]
    PROMOTED_FIELD_NUMBER: _ClassVar[int]
    finished: _engine_pb2.Finished
    engine_id: str
    sender_wait_s: float
    transfer_s: float
    receipt_to_allocation_s: float
    promoted: bool
    def __init__(self, finished: _Optional[_Union[_engine_pb2.Finished, _Mapping]] = ..., engine_id: _Optional[str] = ..., sender_wait_s: _Optional[float] = ..., transfer_s: _Optional[float] = ..., receipt_to_allocation_s: _Optional[float] = ..., promoted: _Optional[bool] = ...) -> None: ...

class WithdrawRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: _common_pb2.ResultKey
    def __init__(self, key: _Optional[_Union[_common_pb2.ResultKey, _Mapping]] = ...) -> None: ...

class WithdrawResponse(_message.Message):
    __slots__ = ("withdrawn",)
    WITHDRAWN_FIELD_NUMBER: _ClassVar[int]
    withdrawn: bool
    def __init__(self, withdrawn: _Optional[bool] = ...) -> None: ...
