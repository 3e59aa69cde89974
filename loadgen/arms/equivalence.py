"""Value equivalence: each arm's per-workflow answers against the floor's (DESIGN.md §5.1).

The floor runs on its own mesh, so a match is evidence, not a tautology. A workflow mismatches
when it is missing or failed in either arm, when its path differs (another sequence of
(stage, candidate) calls: a diverged branch), or when any answer text differs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from loadgen.workloads.base import WorkflowResult


@dataclass(frozen=True, slots=True)
class Mismatch:
    """One workflow whose outputs differ from the floor's, and why."""

    workflow_id: str
    #: "missing", "failed", "path" or "text".
    reason: str
    detail: str = ""


def _why(arm: WorkflowResult, floor: WorkflowResult) -> Mismatch | None:
    wid = arm.workflow_id
    if arm.error or floor.error:
        return Mismatch(wid, "failed", arm.error or floor.error)
    path = [(s.stage, s.candidate) for s in arm.stages]
    base = [(s.stage, s.candidate) for s in floor.stages]
    if path != base:
        return Mismatch(wid, "path", f"{path} != floor {base}")
    for i, (a, b) in enumerate(zip(arm.stages, floor.stages, strict=True)):
        if a.text != b.text:
            return Mismatch(wid, "text", f"call {i} ({a.stage}) differs")
    return None


def compare_outputs(arm: Iterable[WorkflowResult], floor: Iterable[WorkflowResult]
                    ) -> list[Mismatch]:
    """Every workflow of ``arm`` whose outputs differ from ``floor``'s, by workflow id."""
    base = {r.workflow_id: r for r in floor}
    out = []
    for result in arm:
        other = base.get(result.workflow_id)
        found = (Mismatch(result.workflow_id, "missing") if other is None
                 else _why(result, other))
        if found is not None:
            out.append(found)
    return out


__all__ = ["Mismatch", "compare_outputs"]
