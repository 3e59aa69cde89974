from services.common.pb import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HoldEventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HOLD_EVENT_KIND_UNSPECIFIED: _ClassVar[HoldEventKind]
    HOLD_EVENT_KIND_HELD: _ClassVar[HoldEventKind]
    HOLD_EVENT_KIND_PROMOTED: _ClassVar[HoldEventKind]
    HOLD_EVENT_KIND_SETTLED: _ClassVar[HoldEventKind]
HOLD_EVENT_KIND_UNSPECIFIED: HoldEventKind
HOLD_EVENT_KIND_HELD: HoldEventKind
HOLD_EVENT_KIND_PROMOTED: HoldEventKind
HOLD_EVENT_KIND_SETTLED: HoldEventKind

class ChangesRequest(_message.Message):
    __slots__ = ("after", "limit")
    AFTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    after: int
    limit: int
    def __init__(self, after: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class ChangesResponse(_message.Message):
    __slots__ = ("incarnation", "versions", "next", "more", "established")
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    ESTABLISHED_FIELD_NUMBER: _ClassVar[int]
    incarnation: str
    versions: _containers.RepeatedCompositeFieldContainer[TenantRecordVersion]
    next: int
    more: bool
    established: bool
    def __init__(self, incarnation: _Optional[str] = ..., versions: _Optional[_Iterable[_Union[TenantRecordVersion, _Mapping]]] = ..., next: _Optional[int] = ..., more: _Optional[bool] = ..., established: _Optional[bool] = ...) -> None: ...

class BeginRenewalRequest(_message.Message):
    __slots__ = ("renewer",)
    RENEWER_FIELD_NUMBER: _ClassVar[int]
    renewer: str
    def __init__(self, renewer: _Optional[str] = ...) -> None: ...

class BeginRenewalResponse(_message.Message):
    __slots__ = ("incarnation", "token", "serving_lease_s", "established")
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    SERVING_LEASE_S_FIELD_NUMBER: _ClassVar[int]
    ESTABLISHED_FIELD_NUMBER: _ClassVar[int]
    incarnation: str
    token: int
    serving_lease_s: float
    established: bool
    def __init__(self, incarnation: _Optional[str] = ..., token: _Optional[int] = ..., serving_lease_s: _Optional[float] = ..., established: _Optional[bool] = ...) -> None: ...

class GrantServingRequest(_message.Message):
    __slots__ = ("incarnation", "token", "peers")
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    incarnation: str
    token: int
    peers: int
    def __init__(self, incarnation: _Optional[str] = ..., token: _Optional[int] = ..., peers: _Optional[int] = ...) -> None: ...

class GrantServingResponse(_message.Message):
    __slots__ = ("serving_left_s",)
    SERVING_LEFT_S_FIELD_NUMBER: _ClassVar[int]
    serving_left_s: float
    def __init__(self, serving_left_s: _Optional[float] = ...) -> None: ...

class ClaimRequest(_message.Message):
    __slots__ = ("name", "wait_s", "scope")
    NAME_FIELD_NUMBER: _ClassVar[int]
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    name: _common_pb2.ReuseName
    wait_s: float
    scope: str
    def __init__(self, name: _Optional[_Union[_common_pb2.ReuseName, _Mapping]] = ..., wait_s: _Optional[float] = ..., scope: _Optional[str] = ...) -> None: ...

class ClaimResponse(_message.Message):
    __slots__ = ("promoted", "result", "cost_s", "branch_id", "candidate")
    PROMOTED_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    COST_S_FIELD_NUMBER: _ClassVar[int]
    BRANCH_ID_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    promoted: bool
    result: bytes
    cost_s: float
    branch_id: str
    candidate: str
    def __init__(self, promoted: _Optional[bool] = ..., result: _Optional[bytes] = ..., cost_s: _Optional[float] = ..., branch_id: _Optional[str] = ..., candidate: _Optional[str] = ...) -> None: ...

class HoldFillRequest(_message.Message):
    __slots__ = ("name", "branch_id", "candidate", "scope")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BRANCH_ID_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    name: _common_pb2.ReuseName
    branch_id: str
    candidate: str
    scope: str
    def __init__(self, name: _Optional[_Union[_common_pb2.ReuseName, _Mapping]] = ..., branch_id: _Optional[str] = ..., candidate: _Optional[str] = ..., scope: _Optional[str] = ...) -> None: ...

class HoldFillEvent(_message.Message):
    __slots__ = ("header", "kind", "template_id", "stage_id", "keep_branch", "keep_candidate")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    STAGE_ID_FIELD_NUMBER: _ClassVar[int]
    KEEP_BRANCH_FIELD_NUMBER: _ClassVar[int]
    KEEP_CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.RecordHeader
    kind: HoldEventKind
    template_id: str
    stage_id: str
    keep_branch: str
    keep_candidate: str
    def __init__(self, header: _Optional[_Union[_common_pb2.RecordHeader, _Mapping]] = ..., kind: _Optional[_Union[HoldEventKind, str]] = ..., template_id: _Optional[str] = ..., stage_id: _Optional[str] = ..., keep_branch: _Optional[str] = ..., keep_candidate: _Optional[str] = ...) -> None: ...

class SettleScopeRequest(_message.Message):
    __slots__ = ("scope", "template_id", "stage_id", "keep_branch", "keep_candidate")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    STAGE_ID_FIELD_NUMBER: _ClassVar[int]
    KEEP_BRANCH_FIELD_NUMBER: _ClassVar[int]
    KEEP_CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    scope: str
    template_id: str
    stage_id: str
    keep_branch: str
    keep_candidate: str
    def __init__(self, scope: _Optional[str] = ..., template_id: _Optional[str] = ..., stage_id: _Optional[str] = ..., keep_branch: _Optional[str] = ..., keep_candidate: _Optional[str] = ...) -> None: ...

class SettleScopeResponse(_message.Message):
    __slots__ = ("told",)
    TOLD_FIELD_NUMBER: _ClassVar[int]
    told: int
    def __init__(self, told: _Optional[int] = ...) -> None: ...

class VersionsRequest(_message.Message):
    __slots__ = ("since_seq", "limit")
    SINCE_SEQ_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    since_seq: int
    limit: int
    def __init__(self, since_seq: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class TenantRecordVersion(_message.Message):
    __slots__ = ("tenant", "record_id", "version")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    record_id: str
    version: int
    def __init__(self, tenant: _Optional[str] = ..., record_id: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class VersionsResponse(_message.Message):
    __slots__ = ("write_seq", "versions", "more")
    WRITE_SEQ_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    write_seq: int
    versions: _containers.RepeatedCompositeFieldContainer[TenantRecordVersion]
    more: bool
    def __init__(self, write_seq: _Optional[int] = ..., versions: _Optional[_Iterable[_Union[TenantRecordVersion, _Mapping]]] = ..., more: _Optional[bool] = ...) -> None: ...

class AdoptVersionsRequest(_message.Message):
    __slots__ = ("header", "versions")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.RecordHeader
    versions: _containers.RepeatedCompositeFieldContainer[TenantRecordVersion]
    def __init__(self, header: _Optional[_Union[_common_pb2.RecordHeader, _Mapping]] = ..., versions: _Optional[_Iterable[_Union[TenantRecordVersion, _Mapping]]] = ...) -> None: ...

class AdoptVersionsResponse(_message.Message):
    __slots__ = ("invalidated", "write_seq")
    INVALIDATED_FIELD_NUMBER: _ClassVar[int]
    WRITE_SEQ_FIELD_NUMBER: _ClassVar[int]
    invalidated: int
    write_seq: int
    def __init__(self, invalidated: _Optional[int] = ..., write_seq: _Optional[int] = ...) -> None: ...

class WatchNamesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NameEvents(_message.Message):
    __slots__ = ("header", "added", "removed", "synced")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ADDED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    SYNCED_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.RecordHeader
    added: _containers.RepeatedScalarFieldContainer[bytes]
    removed: _containers.RepeatedScalarFieldContainer[bytes]
    synced: bool
    def __init__(self, header: _Optional[_Union[_common_pb2.RecordHeader, _Mapping]] = ..., added: _Optional[_Iterable[bytes]] = ..., removed: _Optional[_Iterable[bytes]] = ..., synced: _Optional[bool] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: _common_pb2.ReuseName
    def __init__(self, name: _Optional[_Union[_common_pb2.ReuseName, _Mapping]] = ...) -> None: ...

class LookupResponse(_message.Message):
    __slots__ = ("hit", "result", "cost_s")
    HIT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    COST_S_FIELD_NUMBER: _ClassVar[int]
    hit: bool
    result: bytes
    cost_s: float
    def __init__(self, hit: _Optional[bool] = ..., result: _Optional[bytes] = ..., cost_s: _Optional[float] = ...) -> None: ...

class LookupBatch(_message.Message):
    __slots__ = ("lookups",)
    LOOKUPS_FIELD_NUMBER: _ClassVar[int]
    lookups: _containers.RepeatedCompositeFieldContainer[StreamLookup]
    def __init__(self, lookups: _Optional[_Iterable[_Union[StreamLookup, _Mapping]]] = ...) -> None: ...

class StreamLookup(_message.Message):
    __slots__ = ("sequence", "name")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    name: _common_pb2.ReuseName
    def __init__(self, sequence: _Optional[int] = ..., name: _Optional[_Union[_common_pb2.ReuseName, _Mapping]] = ...) -> None: ...

class LookupResults(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[StreamLookupResult]
    def __init__(self, results: _Optional[_Iterable[_Union[StreamLookupResult, _Mapping]]] = ...) -> None: ...

class StreamLookupResult(_message.Message):
    __slots__ = ("sequence", "hit", "result", "cost_s", "error")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    HIT_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    COST_S_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    hit: bool
    result: bytes
    cost_s: float
    error: str
    def __init__(self, sequence: _Optional[int] = ..., hit: _Optional[bool] = ..., result: _Optional[bytes] = ..., cost_s: _Optional[float] = ..., error: _Optional[str] = ...) -> None: ...

class PutRequest(_message.Message):
    __slots__ = ("header", "name", "result", "read_set", "cost_s")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    READ_SET_FIELD_NUMBER: _ClassVar[int]
    COST_S_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.RecordHeader
    name: _common_pb2.ReuseName
    result: bytes
    read_set: _common_pb2.ReadSet
    cost_s: float
    def __init__(self, header: _Optional[_Union[_common_pb2.RecordHeader, _Mapping]] = ..., name: _Optional[_Union[_common_pb2.ReuseName, _Mapping]] = ..., result: _Optional[bytes] = ..., read_set: _Optional[_Union[_common_pb2.ReadSet, _Mapping]] = ..., cost_s: _Optional[float] = ...) -> None: ...

class PutResponse(_message.Message):
    __slots__ = ("stored",)
    STORED_FIELD_NUMBER: _ClassVar[int]
    stored: bool
    def __init__(self, stored: _Optional[bool] = ...) -> None: ...

class PutBatch(_message.Message):
    __slots__ = ("puts",)
    PUTS_FIELD_NUMBER: _ClassVar[int]
    puts: _containers.RepeatedCompositeFieldContainer[PutRequest]
    def __init__(self, puts: _Optional[_Iterable[_Union[PutRequest, _Mapping]]] = ...) -> None: ...

class PutAcks(_message.Message):
    __slots__ = ("acks",)
    ACKS_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[PutAck]
    def __init__(self, acks: _Optional[_Iterable[_Union[PutAck, _Mapping]]] = ...) -> None: ...

class PutAck(_message.Message):
    __slots__ = ("sequence", "stored", "error")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    stored: bool
    error: str
    def __init__(self, sequence: _Optional[int] = ..., stored: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...

class PutShadowRequest(_message.Message):
    __slots__ = ("shadow", "ttl_s")
    SHADOW_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    shadow: _common_pb2.ShadowRecord
    ttl_s: float
    def __init__(self, shadow: _Optional[_Union[_common_pb2.ShadowRecord, _Mapping]] = ..., ttl_s: _Optional[float] = ...) -> None: ...

class PutShadowResponse(_message.Message):
    __slots__ = ("stored",)
    STORED_FIELD_NUMBER: _ClassVar[int]
    stored: bool
    def __init__(self, stored: _Optional[bool] = ...) -> None: ...

class PromoteRequest(_message.Message):
    __slots__ = ("name", "branch_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BRANCH_ID_FIELD_NUMBER: _ClassVar[int]
    name: _common_pb2.ReuseName
    branch_id: str
    def __init__(self, name: _Optional[_Union[_common_pb2.ReuseName, _Mapping]] = ..., branch_id: _Optional[str] = ...) -> None: ...

class PromoteResponse(_message.Message):
    __slots__ = ("promoted", "result", "cost_s")
    PROMOTED_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    COST_S_FIELD_NUMBER: _ClassVar[int]
    promoted: bool
    result: bytes
    cost_s: float
    def __init__(self, promoted: _Optional[bool] = ..., result: _Optional[bytes] = ..., cost_s: _Optional[float] = ...) -> None: ...

class DiscardRequest(_message.Message):
    __slots__ = ("branch_id", "keep_candidate")
    BRANCH_ID_FIELD_NUMBER: _ClassVar[int]
    KEEP_CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    branch_id: str
    keep_candidate: str
    def __init__(self, branch_id: _Optional[str] = ..., keep_candidate: _Optional[str] = ...) -> None: ...

class DiscardResponse(_message.Message):
    __slots__ = ("discarded",)
    DISCARDED_FIELD_NUMBER: _ClassVar[int]
    discarded: int
    def __init__(self, discarded: _Optional[int] = ...) -> None: ...

class RecordWrite(_message.Message):
    __slots__ = ("record_id", "floor")
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    FLOOR_FIELD_NUMBER: _ClassVar[int]
    record_id: str
    floor: int
    def __init__(self, record_id: _Optional[str] = ..., floor: _Optional[int] = ...) -> None: ...

class WriteRecordsRequest(_message.Message):
    __slots__ = ("header", "tenant", "writes", "version")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    WRITES_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    header: _common_pb2.RecordHeader
    tenant: str
    writes: _containers.RepeatedCompositeFieldContainer[RecordWrite]
    version: int
    def __init__(self, header: _Optional[_Union[_common_pb2.RecordHeader, _Mapping]] = ..., tenant: _Optional[str] = ..., writes: _Optional[_Iterable[_Union[RecordWrite, _Mapping]]] = ..., version: _Optional[int] = ...) -> None: ...

class WriteRecordsResponse(_message.Message):
    __slots__ = ("versions", "invalidated", "prior_write_seq", "refused")
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    INVALIDATED_FIELD_NUMBER: _ClassVar[int]
    PRIOR_WRITE_SEQ_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedCompositeFieldContainer[_common_pb2.RecordVersion]
    invalidated: int
    prior_write_seq: int
    refused: bool
    def __init__(self, versions: _Optional[_Iterable[_Union[_common_pb2.RecordVersion, _Mapping]]] = ..., invalidated: _Optional[int] = ..., prior_write_seq: _Optional[int] = ..., refused: _Optional[bool] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("entries", "shadows", "bytes", "budget_bytes", "hits", "misses", "promotions", "invalidations", "evictions", "write_seq", "incarnation", "serving_lease_s", "serving_left_s")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    SHADOWS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    BUDGET_BYTES_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    MISSES_FIELD_NUMBER: _ClassVar[int]
    PROMOTIONS_FIELD_NUMBER: _ClassVar[int]
    INVALIDATIONS_FIELD_NUMBER: _ClassVar[int]
    EVICTIONS_FIELD_NUMBER: _ClassVar[int]
    WRITE_SEQ_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    SERVING_LEASE_S_FIELD_NUMBER: _ClassVar[int]
    SERVING_LEFT_S_FIELD_NUMBER: _ClassVar[int]
    entries: int
    shadows: int
    bytes: int
    budget_bytes: int
    hits: int
    misses: int
    promotions: int
    invalidations: int
    evictions: int
    write_seq: int
    incarnation: str
    serving_lease_s: float
    serving_left_s: float
    def __init__(self, entries: _Optional[int] = ..., shadows: _Optional[int] = ..., bytes: _Optional[int] = ..., budget_bytes: _Optional[int] = ..., hits: _Optional[int] = ..., misses: _Optional[int] = ..., promotions: _Optional[int] = ..., invalidations: _Optional[int] = ..., evictions: _Optional[int] = ..., write_seq: _Optional[int] = ..., incarnation: _Optional[str] = ..., serving_lease_s: _Optional[float] = ..., serving_left_s: _Optional[float] = ...) -> None: ...
