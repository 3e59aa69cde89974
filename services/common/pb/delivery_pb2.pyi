from services.common.pb import common_pb2 as _common_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SubmitRequest(_message.Message):
    __slots__ = ("header", "engine_id", "history_id", "payload", "history_tokens")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    HISTORY_ID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    HISTORY_TOKENS_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.RecordHeader
    engine_id: str
    history_id: str
    payload: bytes
    history_tokens: int
    def __init__(self, header: _Optional[_Union[_common_pb2.RecordHeader, _Mapping]] = ..., engine_id: _Optional[str] = ..., history_id: _Optional[str] = ..., payload: _Optional[bytes] = ..., history_tokens: _Optional[int] = ...) -> None: ...

class SubmitResponse(_message.Message):
    __slots__ = ("accepted",)
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    def __init__(self, accepted: _Optional[bool] = ...) -> None: ...

class PublishLeaseRequest(_message.Message):
    __slots__ = ("lease",)
    LEASE_FIELD_NUMBER: _ClassVar[int]
    lease: _common_pb2.LeaseRecord
    def __init__(self, lease: _Optional[_Union[_common_pb2.LeaseRecord, _Mapping]] = ...) -> None: ...

class PublishLeaseResponse(_message.Message):
    __slots__ = ("accepted",)
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    def __init__(self, accepted: _Optional[bool] = ...) -> None: ...
