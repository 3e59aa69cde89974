"""The shared data set files each ``dynbranch bench`` and ``dynbranch report`` run reads.

A run checks them all before its first cell, so a missing data set ends it at once with one line
naming what is absent and how to supply it (``--data-dir`` or ``DYNBRANCH_DATA_DIR``), never with
a report of failed cells.
"""

from __future__ import annotations

from collections.abc import Iterable

from loadgen.workloads import WORKLOADS
from loadgen.workloads.lads import DATA_FILES as LADS_FILES
from services.corpus.loaders import require_data, use_data_dir

#: The workloads a benchmark runs (``arms``: the one ``--workload`` names); absent: no data.
BENCH_WORKLOADS: dict[str, tuple[str, ...]] = {
    "admission": ("routing", "react"), "load": ("routing",), "soak": tuple(WORKLOADS),
    "workflow-fidelity": ("routing", "subagent", "react")}
#: ``bench arms``'s workload when ``--workload`` is not given.
ARMS_DEFAULT = "routing"


def workload_files(names: Iterable[str]) -> tuple[str, ...]:
    """The data set files of the workloads ``names``."""
    return tuple(f for name in names for f in WORKLOADS[name].data_files)


def bench_files(name: str, workload: str | None = None) -> tuple[str, ...]:
    """The data set files ``dynbranch bench NAME`` reads (``workload``: ``bench arms``'s)."""
    if name == "lads":
        return LADS_FILES
    if name == "arms":
        return workload_files((workload or ARMS_DEFAULT,))
    return workload_files(BENCH_WORKLOADS.get(name, ()))


def report_files(full: bool) -> tuple[str, ...]:
    """The data set files ``dynbranch report`` reads: every workload, and LADS with ``--full``
    (``--only c3`` runs every workload too)."""
    return workload_files(WORKLOADS) + (LADS_FILES if full else ())


def prepare(files: Iterable[str], data_dir: str | None) -> None:
    """Use ``data_dir`` (``--data-dir``; None: the default) for this run and the processes it
    starts, then check it holds ``files``: ``DataUnavailable``, one line, naming what is absent."""
    if data_dir:
        use_data_dir(data_dir)
    require_data(files)


__all__ = ["ARMS_DEFAULT", "BENCH_WORKLOADS", "bench_files", "prepare", "report_files",
           "workload_files"]
