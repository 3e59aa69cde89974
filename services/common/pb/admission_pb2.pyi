from services.common.pb import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OpenBranchRequest(_message.Message):
    __slots__ = ("header", "coordinate", "branch_class", "model")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    COORDINATE_FIELD_NUMBER: _ClassVar[int]
    BRANCH_CLASS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.RecordHeader
    coordinate: str
    branch_class: str
    model: str
    def __init__(self, header: _Optional[_Union[_common_pb2.RecordHeader, _Mapping]] = ..., coordinate: _Optional[str] = ..., branch_class: _Optional[str] = ..., model: _Optional[str] = ...) -> None: ...

class OpenBranchResponse(_message.Message):
    __slots__ = ("open", "reason")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    open: bool
    reason: str
    def __init__(self, open: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class Candidate(_message.Message):
    __slots__ = ("candidate", "rank", "probability", "est_exec_s", "est_gain_s", "est_prompt_tokens", "est_peak_tokens", "stages")
    CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    EST_EXEC_S_FIELD_NUMBER: _ClassVar[int]
    EST_GAIN_S_FIELD_NUMBER: _ClassVar[int]
    EST_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    EST_PEAK_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    candidate: str
    rank: int
    probability: float
    est_exec_s: float
    est_gain_s: float
    est_prompt_tokens: int
    est_peak_tokens: int
    stages: int
    def __init__(self, candidate: _Optional[str] = ..., rank: _Optional[int] = ..., probability: _Optional[float] = ..., est_exec_s: _Optional[float] = ..., est_gain_s: _Optional[float] = ..., est_prompt_tokens: _Optional[int] = ..., est_peak_tokens: _Optional[int] = ..., stages: _Optional[int] = ...) -> None: ...

class AdmitFillsRequest(_message.Message):
    __slots__ = ("header", "coordinate", "candidates", "model", "window_s", "visit")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    COORDINATE_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    VISIT_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.RecordHeader
    coordinate: str
    candidates: _containers.RepeatedCompositeFieldContainer[Candidate]
    model: str
    window_s: float
    visit: int
    def __init__(self, header: _Optional[_Union[_common_pb2.RecordHeader, _Mapping]] = ..., coordinate: _Optional[str] = ..., candidates: _Optional[_Iterable[_Union[Candidate, _Mapping]]] = ..., model: _Optional[str] = ..., window_s: _Optional[float] = ..., visit: _Optional[int] = ...) -> None: ...

class AdmitFillsResponse(_message.Message):
    __slots__ = ("admitted", "load_price")
    ADMITTED_FIELD_NUMBER: _ClassVar[int]
    LOAD_PRICE_FIELD_NUMBER: _ClassVar[int]
    admitted: _containers.RepeatedScalarFieldContainer[str]
    load_price: float
    def __init__(self, admitted: _Optional[_Iterable[str]] = ..., load_price: _Optional[float] = ...) -> None: ...

class ReportOutcomeRequest(_message.Message):
    __slots__ = ("header", "coordinate", "selected", "saved_s", "fill_cost_s", "setup_s", "consumed_producers", "wait_s")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    COORDINATE_FIELD_NUMBER: _ClassVar[int]
    SELECTED_FIELD_NUMBER: _ClassVar[int]
    SAVED_S_FIELD_NUMBER: _ClassVar[int]
    FILL_COST_S_FIELD_NUMBER: _ClassVar[int]
    SETUP_S_FIELD_NUMBER: _ClassVar[int]
    CONSUMED_PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.RecordHeader
    coordinate: str
    selected: str
    saved_s: float
    fill_cost_s: float
    setup_s: float
    consumed_producers: _containers.RepeatedScalarFieldContainer[str]
    wait_s: float
    def __init__(self, header: _Optional[_Union[_common_pb2.RecordHeader, _Mapping]] = ..., coordinate: _Optional[str] = ..., selected: _Optional[str] = ..., saved_s: _Optional[float] = ..., fill_cost_s: _Optional[float] = ..., setup_s: _Optional[float] = ..., consumed_producers: _Optional[_Iterable[str]] = ..., wait_s: _Optional[float] = ...) -> None: ...

class ReportOutcomeResponse(_message.Message):
    __slots__ = ("applied",)
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    applied: bool
    def __init__(self, applied: _Optional[bool] = ...) -> None: ...
