"""Proto ↔ core values for the csl service (STYLE.md §2); errors name the proto field."""

from __future__ import annotations

from collections.abc import Sequence

from services.common.pb import common_pb2, csl_pb2
from services.common.runtime.convert import require
from services.common.values.errors import InvalidArgument, PayloadTooLarge
from services.common.values.reads import (
    MAX_WRITE_RECORDS,
    ReadSet,
    RecordKey,
    RecordRead,
    Shadow,
    check_cost,
    check_record_key,
)
from services.common.values.reuse_name import ReuseName, validate_tenant

MAX_READS = 4096
#: Stores of one PutStream committed together at most (and read ahead at most); of one
#: PutBatches message at most.
PUT_BATCH_MAX = 256
MAX_PRODUCERS = 256
MAX_WRITES = MAX_WRITE_RECORDS
MAX_ID_CHARS = 256


def name_from_proto(msg: common_pb2.ReuseName, field: str = "name") -> ReuseName:
    """A validated reuse name."""
    if not msg.digest:
        raise InvalidArgument(f"{field}.digest", "required")
    try:
        return ReuseName(msg.tenant, msg.digest)
    except InvalidArgument as exc:
        raise InvalidArgument(f"{field}.{exc.field}", str(exc).split(": ", 1)[-1]) from None


def name_to_proto(name: ReuseName) -> common_pb2.ReuseName:
    """The proto form of a reuse name."""
    return common_pb2.ReuseName(tenant=name.tenant, digest=name.digest)


def read_set_from_proto(msg: common_pb2.ReadSet, field: str = "read_set") -> ReadSet:
    """A validated read-set (``complete`` as sent: unset means incomplete provenance)."""
    if len(msg.reads) > MAX_READS:
        raise PayloadTooLarge(f"{field}.reads", f"at most {MAX_READS} reads")
    if len(msg.producers) > MAX_PRODUCERS:
        raise PayloadTooLarge(f"{field}.producers", f"at most {MAX_PRODUCERS} producers")
    try:
        reads = tuple(RecordRead(r.record_id, r.version) for r in msg.reads)
    except InvalidArgument as exc:
        raise InvalidArgument(f"{field}.reads.{exc.field}", str(exc).split(": ", 1)[-1]) from None
    producers = tuple(name_from_proto(p, f"{field}.producers") for p in msg.producers)
    return ReadSet(reads, msg.complete, producers)


def read_set_to_proto(rs: ReadSet) -> common_pb2.ReadSet:
    """The proto form of a read-set."""
    msg = common_pb2.ReadSet()
    read_set_into(msg, rs)
    return msg


def read_set_into(msg: common_pb2.ReadSet, rs: ReadSet) -> None:
    """Fill ``msg``, an empty message (e.g. a new request's own read_set field), in place with
    ``rs`` (the field is set even for an empty read-set)."""
    msg.complete = rs.complete
    for r in rs.reads:
        msg.reads.add(record_id=r.record_id, version=r.version)
    for p in rs.producers:
        msg.producers.add(tenant=p.tenant, digest=p.digest)


def result_from_proto(result: bytes, field: str, max_bytes: int) -> bytes:
    """A required, bounded result payload."""
    if not result:
        raise InvalidArgument(field, "required")
    if len(result) > max_bytes:
        raise PayloadTooLarge(field, f"larger than {max_bytes} bytes")
    return result


def shadow_from_proto(msg: common_pb2.ShadowRecord, max_result_bytes: int) -> Shadow:
    """A validated shadow."""
    check_cost(msg.cost_s, "shadow.cost_s")
    return Shadow(
        name=name_from_proto(msg.name, "shadow.name"),
        branch_id=require(msg.branch_id, "shadow.branch_id", MAX_ID_CHARS),
        candidate=msg.candidate, rank=msg.rank, producer=msg.producer,
        result=result_from_proto(msg.result, "shadow.result", max_result_bytes),
        read_set=read_set_from_proto(msg.read_set, "shadow.read_set"), cost_s=msg.cost_s)


def shadow_to_proto(s: Shadow) -> common_pb2.ShadowRecord:
    """The proto form of a shadow (header left to the caller)."""
    return common_pb2.ShadowRecord(
        name=name_to_proto(s.name), branch_id=s.branch_id, candidate=s.candidate, rank=s.rank,
        producer=s.producer, result=s.result, read_set=read_set_to_proto(s.read_set),
        cost_s=s.cost_s)


def floors_from_proto(msg: csl_pb2.WriteRecordsRequest) -> list[int]:
    """The writer's floors of a write, in request order (0: none)."""
    return [w.floor for w in msg.writes]


def versions_from_proto(items: Sequence[csl_pb2.TenantRecordVersion],
                        field: str = "versions") -> list[tuple[RecordKey, int]]:
    """Validated ``((tenant, record_id), version)`` pairs."""
    if len(items) > MAX_WRITES:
        raise PayloadTooLarge(field, f"at most {MAX_WRITES} records per request")
    out = []
    for item in items:
        try:
            validate_tenant(item.tenant)
            read = RecordRead(item.record_id, item.version)
        except InvalidArgument as exc:
            raise InvalidArgument(f"{field}.{exc.field}", str(exc).split(": ", 1)[-1]) from None
        out.append(((item.tenant, read.record_id), read.version))
    return out


def versions_to_proto(items: Sequence[tuple[RecordKey, int]]
                      ) -> list[csl_pb2.TenantRecordVersion]:
    """The proto form of namespaced record versions."""
    return [csl_pb2.TenantRecordVersion(tenant=t, record_id=r, version=v)
            for (t, r), v in items]


def record_ids_from_proto(msg: csl_pb2.WriteRecordsRequest) -> list[str]:
    """The record ids of a write, in request order."""
    if not msg.writes:
        raise InvalidArgument("writes", "at least one record")
    if len(msg.writes) > MAX_WRITES:
        raise PayloadTooLarge("writes", f"at most {MAX_WRITES} records per request")
    validate_tenant(msg.tenant)
    return [check_record_key(msg.tenant, w.record_id, f"writes[{i}].record_id")
            for i, w in enumerate(msg.writes)]


__all__ = [
    "floors_from_proto", "name_from_proto", "name_to_proto", "read_set_from_proto",
    "read_set_into", "read_set_to_proto", "record_ids_from_proto", "result_from_proto",
    "shadow_from_proto", "shadow_to_proto", "versions_from_proto", "versions_to_proto",
]
