"""LADS records to and from ``dynbranch.v1`` messages (the values live in ``leases.py``)."""

from __future__ import annotations

from typing import cast

from google.protobuf.timestamp_pb2 import Timestamp

from services.common.pb import common_pb2
from services.common.runtime.convert import require
from services.common.runtime.records import make_header, published_s
from services.common.values.errors import InvalidArgument
from services.common.values.leases import (
    BudgetRecord,
    InventoryEntry,
    InventoryView,
    LeaseRecord,
    LeaseState,
    ResultKey,
)

MAX_ID = 256


def _ts(seconds: float) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


def _s(ts: Timestamp) -> float:
    ns: int = ts.ToNanoseconds()
    return ns / 1e9


def key_to_proto(key: ResultKey) -> common_pb2.ResultKey:
    """A result key as a message."""
    return common_pb2.ResultKey(workflow_id=key.workflow_id, turn=key.turn)


def key_from_proto(msg: common_pb2.ResultKey, field: str = "key") -> ResultKey:
    """A validated result key: a workflow id and a turn from 1."""
    workflow = require(msg.workflow_id, f"{field}.workflow_id", MAX_ID)
    if msg.turn < 1:
        raise InvalidArgument(f"{field}.turn", f"must be >= 1, got {msg.turn}")
    return ResultKey(workflow, msg.turn)


def lease_to_proto(rec: LeaseRecord) -> common_pb2.LeaseRecord:
    """A lease record as a message."""
    return common_pb2.LeaseRecord(
        header=make_header(str(rec.key), rec.sequence, f"engine_agent/{rec.engine_id}",
                           rec.published_at),
        engine_id=rec.engine_id, key=key_to_proto(rec.key), prefix_digest=rec.prefix_digest,
        blocks=rec.blocks, budget_generation=rec.budget_generation,
        state=cast(common_pb2.LeaseState, int(rec.state)),
        payload_digest=rec.payload_digest, exclusive_blocks=rec.exclusive,
        granted_at=_ts(rec.granted_at), deadline=_ts(rec.deadline))


def lease_from_proto(msg: common_pb2.LeaseRecord) -> LeaseRecord:
    """A lease record from a message (an unknown state is INVALID_ARGUMENT)."""
    try:
        state = LeaseState(msg.state)
    except ValueError:
        raise InvalidArgument("lease.state", f"unknown lease state {msg.state}") from None
    return LeaseRecord(msg.engine_id, key_from_proto(msg.key, "lease.key"),
                       msg.header.sequence, published_s(msg.header), msg.prefix_digest,
                       msg.payload_digest, msg.budget_generation, state, msg.blocks,
                       msg.exclusive_blocks, _s(msg.granted_at), _s(msg.deadline))


def budget_to_proto(rec: BudgetRecord) -> common_pb2.BudgetRecord:
    """A budget record as a message."""
    return common_pb2.BudgetRecord(
        header=make_header(rec.engine_id, rec.generation, f"engine_agent/{rec.engine_id}",
                           rec.published_at),
        target=rec.target, protected=rec.protected, capacity=rec.capacity,
        free_blocks=rec.free_blocks, headroom=rec.headroom, demand=rec.demand,
        denied=[key_to_proto(k) for k in rec.denied], waiting=rec.waiting,
        running=rec.running, max_running=rec.max_running, kappa_s=rec.kappa_s)


def budget_from_proto(msg: common_pb2.BudgetRecord) -> BudgetRecord:
    """A budget record from a message."""
    return BudgetRecord(msg.header.id, msg.header.sequence, published_s(msg.header), msg.target,
                        msg.protected, msg.capacity, msg.free_blocks, msg.headroom, msg.demand,
                        tuple(key_from_proto(k, "budget.denied") for k in msg.denied),
                        msg.waiting, msg.running, msg.max_running, msg.kappa_s)


def inventory_to_proto(view: InventoryView) -> common_pb2.InventoryView:
    """The sender's inventory view as a message."""
    return common_pb2.InventoryView(
        header=make_header(view.engine_id, view.sequence, "delivery", view.published_at),
        entries=[common_pb2.InventoryEntry(key=key_to_proto(e.key), ready_at=_ts(e.ready_at),
                                           payload_bytes=e.payload_bytes, committed=e.committed)
                 for e in view.entries],
        backlog_bytes=view.backlog_bytes, link_bytes_per_s=view.link_bytes_per_s,
        framing_bytes=view.framing_bytes)


def inventory_from_proto(msg: common_pb2.InventoryView) -> InventoryView:
    """The sender's inventory view from a message."""
    entries = tuple(InventoryEntry(key_from_proto(e.key, "entries.key"), _s(e.ready_at),
                                   e.payload_bytes, e.committed) for e in msg.entries)
    return InventoryView(require(msg.header.id, "header.id", MAX_ID), msg.header.sequence,
                         published_s(msg.header), entries, msg.backlog_bytes,
                         msg.link_bytes_per_s, msg.framing_bytes)


__all__ = ["budget_from_proto", "budget_to_proto", "inventory_from_proto", "inventory_to_proto",
           "key_from_proto", "key_to_proto", "lease_from_proto", "lease_to_proto"]
