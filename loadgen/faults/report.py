"""Figures and table of ``dynbranch bench faults``: one row per fault cell against the floor.

Latency is wall seconds at the run's time scale and is taken over Routing workflows only (plain
calls are another size); every item, plain or not, counts towards items, lost and wrong.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from loadgen.arms.stats import quantile
from loadgen.faults.mixed_load import ItemOutcome


@dataclass(frozen=True, slots=True)
class Cell:
    """One fault: ``kill`` (SIGKILL, restart on the same port) of a service, or a proxy mode
    (``delay``, ``reset``, ``blackhole``) on the gateways' path to one."""

    name: str
    target: str
    fault: str
    #: Engine kills: wait until a ``fill`` or a ``canonical`` generation runs on the target.
    trigger: str = ""


@dataclass(slots=True)
class CellRun:
    """What happened in one cell (times are ``time.monotonic`` seconds)."""

    cell: Cell
    outcomes: list[ItemOutcome]
    t_fault: float
    t_heal: float
    #: The target engine's load view when it was killed (engine kills only).
    at_kill: dict[str, int] | None = None
    proxy: dict[str, int] = field(default_factory=dict)
    #: Services found exited at the cell's end without being killed by it (a crash: a finding).
    crashed: list[str] = field(default_factory=list)


#: Recovered once an item started after the heal completes with no retry within this many
#: times the floor's p50 of its kind.
RECOVERED_WITHIN = 1.5


def _p(values: list[float], q: float) -> float | None:
    return round(quantile(values, q), 3) if values else None


def _ratio(value: float | None, base: float | None) -> float | None:
    return round(value / base, 2) if value is not None and base else None


def _errors(outcomes: Iterable[ItemOutcome]) -> dict[str, int]:
    return dict(sum((o.errors for o in outcomes), Counter()))


def floor_summary(floor: list[ItemOutcome]) -> dict[str, Any]:
    """The floor's own figures: p50 latency per kind, and whether it lost anything."""
    p50 = {kind: _p([o.latency_s for o in floor if o.ok and o.kind == kind], 0.5)
           for kind in ("routing", "plain", "tool")}
    return {"items": len(floor), "lost": sum(not o.ok for o in floor),
            "retries": sum(o.retries for o in floor), "errors": _errors(floor),
            "p50_s": p50, "p99_routing_s": _p([o.latency_s for o in floor
                                                if o.ok and o.kind == "routing"], 0.99)}


def _recover_s(run: CellRun, p50: dict[str, float | None]) -> float | None:
    normal = [o.end for o in run.outcomes
              if o.ok and o.start >= run.t_heal and o.retries == 0
              and o.latency_s <= RECOVERED_WITHIN * (p50.get(o.kind) or float("inf"))]
    return round(min(normal) - run.t_heal, 3) if normal else None


def _stall_s(run: CellRun) -> float:
    """Longest stretch from the fault on with no item completing successfully."""
    ends = sorted([run.t_fault, *(o.end for o in run.outcomes if o.ok and o.end >= run.t_fault)])
    last = max(o.end for o in run.outcomes) if run.outcomes else run.t_fault
    return round(max(b - a for a, b in zip(ends, [*ends[1:], last], strict=True)), 3)


def summarize(run: CellRun, floor: dict[int, ItemOutcome], base: dict[str, Any]) -> dict[str, Any]:
    """One cell's row: lost, wrong against the floor, retries, errors, latency, recovery."""
    outs = run.outcomes
    verified = [o for o in outs if o.ok and o.key in floor and floor[o.key].ok]
    wrong = [o.key for o in verified if floor[o.key].texts != o.texts]
    window = [o.latency_s for o in outs if o.kind == "routing" and o.ok
              and o.start <= run.t_heal and o.end >= run.t_fault]
    before = [o.latency_s for o in outs if o.kind == "routing" and o.ok and o.end < run.t_fault]
    p50, p99 = _p(window, 0.5), _p(window, 0.99)
    floor_p50 = base["p50_s"]["routing"]
    return {
        "cell": run.cell.name, "target": run.cell.target, "fault": run.cell.fault,
        "items": len(outs), "routing": sum(o.kind == "routing" for o in outs),
        "tool": sum(o.kind == "tool" for o in outs),
        "lost": sum(not o.ok for o in outs), "wrong": len(wrong), "wrong_keys": wrong[:5],
        "unverified": sum(o.ok for o in outs) - len(verified),
        "retries": sum(o.retries for o in outs), "items_retried": sum(o.retries > 0 for o in outs),
        "errors": _errors(outs), "lost_errors": [o.last_error for o in outs if not o.ok][:3],
        "fault_s": round(run.t_heal - run.t_fault, 3), "in_window": len(window),
        "p50_before_s": _p(before, 0.5), "p50_fault_s": p50, "p99_fault_s": p99,
        "p50_vs_floor": _ratio(p50, floor_p50), "p99_vs_floor": _ratio(p99, floor_p50),
        "recover_s": _recover_s(run, base["p50_s"]), "stall_s": _stall_s(run),
        "at_kill": run.at_kill, "proxy": run.proxy, "crashed": run.crashed,
    }


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def _state(row: dict[str, Any]) -> str:
    if row["at_kill"] is not None:
        k = row["at_kill"]
        return f"run {k['running']} fill {k['fill_running']}"
    if row["fault"] == "kill" and row["target"].startswith("engine"):
        return "trigger missed"
    return f"resets {row['proxy']['resets']}" if row["proxy"] else ""


def print_table(rows: list[dict[str, Any]], base: dict[str, Any], time_scale: float) -> None:
    """The human table (plain text, one line per cell)."""
    head = (f"{'cell':<31}{'at fault':<18}{'items':>6}{'lost':>5}{'wrong':>6}{'retry':>6}"
            f"{'fault s':>8}{'p50 s':>7}{'p99 s':>7}{'p50/fl':>7}{'p99/fl':>7}{'recov s':>8}"
            f"{'stall s':>8}  errors")
    print(f"\nfault matrix (SIMULATED engines, time scale {time_scale}; latency = Routing "
          f"workflow wall s overlapping the fault window; /fl = ratio to the floor's p50)")
    print(f"floor (c1=off c2=off, no faults): {base['items']} items, lost {base['lost']}, "
          f"Routing p50 {base['p50_s']['routing']} s p99 {base['p99_routing_s']} s, "
          f"plain p50 {base['p50_s']['plain']} s"
          + (f"; services exited: {', '.join(base['crashed'])}" if base.get("crashed") else ""))
    print(head)
    print("-" * len(head))
    for r in rows:
        errors = ", ".join(f"{k} {v}" for k, v in sorted(r["errors"].items())) or "none"
        print(f"{r['cell']:<31}{_state(r):<18}{r['items']:>6}{r['lost']:>5}{r['wrong']:>6}"
              f"{r['retries']:>6}{r['fault_s']:>8}{_cell(r['p50_fault_s']):>7}"
              f"{_cell(r['p99_fault_s']):>7}{_cell(r['p50_vs_floor']):>7}"
              f"{_cell(r['p99_vs_floor']):>7}{_cell(r['recover_s']):>8}{r['stall_s']:>8}  "
              f"{errors}")
    for r in rows:
        if r["crashed"] or r["unverified"]:
            print(f"{r['cell']}: exited without being killed: {r['crashed'] or 'none'}; "
                  f"{r['unverified']} outputs not compared (the floor lost them)")
    print(flush=True)


__all__ = ["Cell", "CellRun", "RECOVERED_WITHIN", "floor_summary", "print_table", "summarize"]
