import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PriorityClass(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRIORITY_CLASS_UNSPECIFIED: _ClassVar[PriorityClass]
    PRIORITY_CLASS_CANONICAL: _ClassVar[PriorityClass]
    PRIORITY_CLASS_FILL: _ClassVar[PriorityClass]

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    FINISH_REASON_LENGTH: _ClassVar[FinishReason]
    FINISH_REASON_STOP: _ClassVar[FinishReason]
    FINISH_REASON_ABORT: _ClassVar[FinishReason]
    FINISH_REASON_ERROR: _ClassVar[FinishReason]

class LeaseState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LEASE_STATE_UNSPECIFIED: _ClassVar[LeaseState]
    LEASE_STATE_ACTIVE: _ClassVar[LeaseState]
    LEASE_STATE_HANDED_OFF: _ClassVar[LeaseState]
    LEASE_STATE_REVOKED: _ClassVar[LeaseState]
    LEASE_STATE_EXPIRED: _ClassVar[LeaseState]
    LEASE_STATE_RELEASED: _ClassVar[LeaseState]
PRIORITY_CLASS_UNSPECIFIED: PriorityClass
PRIORITY_CLASS_CANONICAL: PriorityClass
PRIORITY_CLASS_FILL: PriorityClass
FINISH_REASON_UNSPECIFIED: FinishReason
FINISH_REASON_LENGTH: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_ABORT: FinishReason
FINISH_REASON_ERROR: FinishReason
LEASE_STATE_UNSPECIFIED: LeaseState
LEASE_STATE_ACTIVE: LeaseState
LEASE_STATE_HANDED_OFF: LeaseState
LEASE_STATE_REVOKED: LeaseState
LEASE_STATE_EXPIRED: LeaseState
LEASE_STATE_RELEASED: LeaseState

class RecordHeader(_message.Message):
    __slots__ = ("id", "sequence", "published_at", "producer")
    ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    PUBLISHED_AT_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    id: str
    sequence: int
    published_at: _timestamp_pb2.Timestamp
    producer: str
    def __init__(self, id: _Optional[str] = ..., sequence: _Optional[int] = ..., published_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., producer: _Optional[str] = ...) -> None: ...

class ChatSpec(_message.Message):
    __slots__ = ("messages_json", "tools_json", "tool_choice", "tool_name", "parallel_tool_calls", "response_format_json")
    MESSAGES_JSON_FIELD_NUMBER: _ClassVar[int]
    TOOLS_JSON_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FORMAT_JSON_FIELD_NUMBER: _ClassVar[int]
    messages_json: str
    tools_json: str
    tool_choice: str
    tool_name: str
    parallel_tool_calls: bool
    response_format_json: str
    def __init__(self, messages_json: _Optional[str] = ..., tools_json: _Optional[str] = ..., tool_choice: _Optional[str] = ..., tool_name: _Optional[str] = ..., parallel_tool_calls: _Optional[bool] = ..., response_format_json: _Optional[str] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("id", "name", "arguments")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    arguments: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class SamplingParams(_message.Message):
    __slots__ = ("temperature", "top_p", "top_k", "seed", "max_tokens", "stop", "ignore_eos")
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    top_p: float
    top_k: int
    seed: int
    max_tokens: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    ignore_eos: bool
    def __init__(self, temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., seed: _Optional[int] = ..., max_tokens: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., ignore_eos: _Optional[bool] = ...) -> None: ...

class ReuseName(_message.Message):
    __slots__ = ("tenant", "digest")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    digest: str
    def __init__(self, tenant: _Optional[str] = ..., digest: _Optional[str] = ...) -> None: ...

class RecordVersion(_message.Message):
    __slots__ = ("record_id", "version")
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    record_id: str
    version: int
    def __init__(self, record_id: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class ReadSet(_message.Message):
    __slots__ = ("reads", "complete", "producers")
    READS_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    PRODUCERS_FIELD_NUMBER: _ClassVar[int]
    reads: _containers.RepeatedCompositeFieldContainer[RecordVersion]
    complete: bool
    producers: _containers.RepeatedCompositeFieldContainer[ReuseName]
    def __init__(self, reads: _Optional[_Iterable[_Union[RecordVersion, _Mapping]]] = ..., complete: _Optional[bool] = ..., producers: _Optional[_Iterable[_Union[ReuseName, _Mapping]]] = ...) -> None: ...

class StageDemand(_message.Message):
    __slots__ = ("header", "workflow_type", "workflow_id", "agent_id", "template_id", "stage_id", "stage_version", "model", "prompt", "sampling", "inputs", "outputs", "offered", "observation")
    class InputsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class OutputsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    HEADER_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_TYPE_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_ID_FIELD_NUMBER: _ClassVar[int]
    STAGE_ID_FIELD_NUMBER: _ClassVar[int]
    STAGE_VERSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    OFFERED_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    header: RecordHeader
    workflow_type: str
    workflow_id: str
    agent_id: str
    template_id: str
    stage_id: str
    stage_version: int
    model: str
    prompt: str
    sampling: SamplingParams
    inputs: _containers.ScalarMap[str, str]
    outputs: _containers.ScalarMap[str, str]
    offered: _containers.RepeatedScalarFieldContainer[str]
    observation: str
    def __init__(self, header: _Optional[_Union[RecordHeader, _Mapping]] = ..., workflow_type: _Optional[str] = ..., workflow_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., template_id: _Optional[str] = ..., stage_id: _Optional[str] = ..., stage_version: _Optional[int] = ..., model: _Optional[str] = ..., prompt: _Optional[str] = ..., sampling: _Optional[_Union[SamplingParams, _Mapping]] = ..., inputs: _Optional[_Mapping[str, str]] = ..., outputs: _Optional[_Mapping[str, str]] = ..., offered: _Optional[_Iterable[str]] = ..., observation: _Optional[str] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "cached_prompt_tokens", "completion_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    cached_prompt_tokens: int
    completion_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., cached_prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ...) -> None: ...

class Timings(_message.Message):
    __slots__ = ("queue_s", "prefill_s", "decode_s", "total_s")
    QUEUE_S_FIELD_NUMBER: _ClassVar[int]
    PREFILL_S_FIELD_NUMBER: _ClassVar[int]
    DECODE_S_FIELD_NUMBER: _ClassVar[int]
    TOTAL_S_FIELD_NUMBER: _ClassVar[int]
    queue_s: float
    prefill_s: float
    decode_s: float
    total_s: float
    def __init__(self, queue_s: _Optional[float] = ..., prefill_s: _Optional[float] = ..., decode_s: _Optional[float] = ..., total_s: _Optional[float] = ...) -> None: ...

class LoadView(_message.Message):
    __slots__ = ("header", "model", "running", "waiting", "max_running", "kv_blocks_used", "kv_blocks_total", "fill_running", "fill_kv_blocks", "block_size", "prefix_queries_tokens", "prefix_hit_tokens", "leases_supported")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNNING_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_USED_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    FILL_RUNNING_FIELD_NUMBER: _ClassVar[int]
    FILL_KV_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    PREFIX_QUERIES_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_HIT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LEASES_SUPPORTED_FIELD_NUMBER: _ClassVar[int]
    header: RecordHeader
    model: str
    running: int
    waiting: int
    max_running: int
    kv_blocks_used: int
    kv_blocks_total: int
    fill_running: int
    fill_kv_blocks: int
    block_size: int
    prefix_queries_tokens: int
    prefix_hit_tokens: int
    leases_supported: bool
    def __init__(self, header: _Optional[_Union[RecordHeader, _Mapping]] = ..., model: _Optional[str] = ..., running: _Optional[int] = ..., waiting: _Optional[int] = ..., max_running: _Optional[int] = ..., kv_blocks_used: _Optional[int] = ..., kv_blocks_total: _Optional[int] = ..., fill_running: _Optional[int] = ..., fill_kv_blocks: _Optional[int] = ..., block_size: _Optional[int] = ..., prefix_queries_tokens: _Optional[int] = ..., prefix_hit_tokens: _Optional[int] = ..., leases_supported: _Optional[bool] = ...) -> None: ...

class ShadowRecord(_message.Message):
    __slots__ = ("header", "name", "branch_id", "candidate", "rank", "producer", "result", "read_set", "cost_s")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    BRANCH_ID_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    READ_SET_FIELD_NUMBER: _ClassVar[int]
    COST_S_FIELD_NUMBER: _ClassVar[int]
    header: RecordHeader
    name: ReuseName
    branch_id: str
    candidate: str
    rank: int
    producer: str
    result: bytes
    read_set: ReadSet
    cost_s: float
    def __init__(self, header: _Optional[_Union[RecordHeader, _Mapping]] = ..., name: _Optional[_Union[ReuseName, _Mapping]] = ..., branch_id: _Optional[str] = ..., candidate: _Optional[str] = ..., rank: _Optional[int] = ..., producer: _Optional[str] = ..., result: _Optional[bytes] = ..., read_set: _Optional[_Union[ReadSet, _Mapping]] = ..., cost_s: _Optional[float] = ...) -> None: ...

class ResultKey(_message.Message):
    __slots__ = ("workflow_id", "turn")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    turn: int
    def __init__(self, workflow_id: _Optional[str] = ..., turn: _Optional[int] = ...) -> None: ...

class LeaseRecord(_message.Message):
    __slots__ = ("header", "engine_id", "key", "prefix_digest", "blocks", "budget_generation", "state", "payload_digest", "exclusive_blocks", "granted_at", "deadline")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    PREFIX_DIGEST_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_GENERATION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_DIGEST_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIVE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    GRANTED_AT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    header: RecordHeader
    engine_id: str
    key: ResultKey
    prefix_digest: str
    blocks: int
    budget_generation: int
    state: LeaseState
    payload_digest: str
    exclusive_blocks: int
    granted_at: _timestamp_pb2.Timestamp
    deadline: _timestamp_pb2.Timestamp
    def __init__(self, header: _Optional[_Union[RecordHeader, _Mapping]] = ..., engine_id: _Optional[str] = ..., key: _Optional[_Union[ResultKey, _Mapping]] = ..., prefix_digest: _Optional[str] = ..., blocks: _Optional[int] = ..., budget_generation: _Optional[int] = ..., state: _Optional[_Union[LeaseState, str]] = ..., payload_digest: _Optional[str] = ..., exclusive_blocks: _Optional[int] = ..., granted_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class BudgetRecord(_message.Message):
    __slots__ = ("header", "target", "protected", "capacity", "free_blocks", "headroom", "demand", "denied", "waiting", "running", "max_running", "kappa_s")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    PROTECTED_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    FREE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    HEADROOM_FIELD_NUMBER: _ClassVar[int]
    DEMAND_FIELD_NUMBER: _ClassVar[int]
    DENIED_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    MAX_RUNNING_FIELD_NUMBER: _ClassVar[int]
    KAPPA_S_FIELD_NUMBER: _ClassVar[int]
    header: RecordHeader
    target: int
    protected: int
    capacity: int
    free_blocks: int
    headroom: int
    demand: int
    denied: _containers.RepeatedCompositeFieldContainer[ResultKey]
    waiting: int
    running: int
    max_running: int
    kappa_s: float
    def __init__(self, header: _Optional[_Union[RecordHeader, _Mapping]] = ..., target: _Optional[int] = ..., protected: _Optional[int] = ..., capacity: _Optional[int] = ..., free_blocks: _Optional[int] = ..., headroom: _Optional[int] = ..., demand: _Optional[int] = ..., denied: _Optional[_Iterable[_Union[ResultKey, _Mapping]]] = ..., waiting: _Optional[int] = ..., running: _Optional[int] = ..., max_running: _Optional[int] = ..., kappa_s: _Optional[float] = ...) -> None: ...

class InventoryEntry(_message.Message):
    __slots__ = ("key", "ready_at", "payload_bytes", "committed")
    KEY_FIELD_NUMBER: _ClassVar[int]
    READY_AT_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    key: ResultKey
    ready_at: _timestamp_pb2.Timestamp
    payload_bytes: int
    committed: bool
    def __init__(self, key: _Optional[_Union[ResultKey, _Mapping]] = ..., ready_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., payload_bytes: _Optional[int] = ..., committed: _Optional[bool] = ...) -> None: ...

class InventoryView(_message.Message):
    __slots__ = ("header", "entries", "backlog_bytes", "link_bytes_per_s", "framing_bytes")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    BACKLOG_BYTES_FIELD_NUMBER: _ClassVar[int]
    LINK_BYTES_PER_S_FIELD_NUMBER: _ClassVar[int]
    FRAMING_BYTES_FIELD_NUMBER: _ClassVar[int]
    header: RecordHeader
    entries: _containers.RepeatedCompositeFieldContainer[InventoryEntry]
    backlog_bytes: int
    link_bytes_per_s: float
    framing_bytes: int
    def __init__(self, header: _Optional[_Union[RecordHeader, _Mapping]] = ..., entries: _Optional[_Iterable[_Union[InventoryEntry, _Mapping]]] = ..., backlog_bytes: _Optional[int] = ..., link_bytes_per_s: _Optional[float] = ..., framing_bytes: _Optional[int] = ...) -> None: ...

class MuxError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...
