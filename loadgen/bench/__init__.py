"""Benchmarks: each module exposes ``run(quick: bool) -> dict``; ``dynbranch bench NAME`` runs it.

Conventions: ``--quick`` finishes in under a minute on 2 cores; ``--json`` prints one JSON object
as the last line of stdout; every figure that compares is a ratio measured side by side in one run.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

#: Benchmark name → module under ``loadgen.bench``.
BENCHMARKS = {
    "overhead": "loadgen.bench.overhead",
    "csl": "loadgen.bench.csl",
    "fidelity": "loadgen.bench.fidelity",
    "workflow-fidelity": "loadgen.bench.workflow_fidelity",
    "arms": "loadgen.bench.arms",
    "interference": "loadgen.bench.interference",
    "admission": "loadgen.bench.admission",
    "lads": "loadgen.bench.lads",
    "load": "loadgen.bench.load",
    "soak": "loadgen.bench.soak",
    "scaleout": "loadgen.bench.scaleout",
    "faults": "loadgen.bench.faults",
    "shards": "loadgen.bench.shards",
}


def runner(name: str) -> Callable[[bool], dict[str, Any]]:
    """The ``run`` function of a benchmark (ImportError when it is not built yet). Not named
    ``load``: importing the ``load`` benchmark would shadow it on this package."""
    return importlib.import_module(BENCHMARKS[name]).run


__all__ = ["BENCHMARKS", "runner"]
