"""Workload harnesses of the four paper workloads (dynbranch §2.1, §5.1), on the client SDK.

- ``routing``: BFCL function calls; router → handler → executor.
- ``react``: HotpotQA multi-hop QA; think → retrieve(entity) → read per hop.
- ``subagent``: MuSiQue decompositions; plan → retrieve → read per sub-task → synthesis.
- ``hci``: Schema-Guided Dialogue offers; offer → user think → fulfil(pick).

Instances come from the shared data sets at run time (``$DYNBRANCH_DATA_DIR``, else
``../shared/data``; never copied into the repository); each harness lists its files in
``data_files``, and ``DataUnavailable`` says which file is missing. See ``base`` for how
decisions and simulated latency are taken, ``schedule`` for arrivals.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadgen.workloads.base import (
    DataUnavailable,
    SimClock,
    StageRecord,
    Trace,
    WorkflowResult,
    Workload,
)
from loadgen.workloads.hci import HciWorkload
from loadgen.workloads.react import ReactWorkload
from loadgen.workloads.routing import RoutingWorkload
from loadgen.workloads.schedule import Schedule, ScheduledWorkflow, build_schedule
from loadgen.workloads.subagent import SubagentWorkload

#: Workload name → harness class.
WORKLOADS: dict[str, type[Workload]] = {
    w.name: w for w in (RoutingWorkload, ReactWorkload, SubagentWorkload, HciWorkload)
}


def get_workload(name: str, data_dir: str | Path | None = None, **options: Any) -> Workload:
    """The harness called ``name`` (``options``: e.g. ``split``, ``split_seed``,
    ``replay_rate``); ``KeyError`` listing the known names otherwise."""
    if name not in WORKLOADS:
        raise KeyError(f"unknown workload {name!r}; known: {', '.join(sorted(WORKLOADS))}")
    return WORKLOADS[name](data_dir, **options)


__all__ = [
    "WORKLOADS", "DataUnavailable", "Schedule", "ScheduledWorkflow", "SimClock", "StageRecord",
    "Trace", "WorkflowResult", "Workload", "build_schedule", "get_workload",
]
