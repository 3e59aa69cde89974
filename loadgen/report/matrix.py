"""What ``dynbranch report`` runs: its matrices, the options of one cell, the sweeps of the full
matrix and the C3 study's levels.

Plain constants and one function, no heavy imports: the report runs them, its progress counts
them, and its help texts (``loadgen.report.arguments``) and summary format them, so a number said
about a run is the number that runs.
"""

from __future__ import annotations

from typing import Any

from loadgen.arms.specs import ALL_ARMS

#: Loads: levels the engines feel (``load_levels.LEVELS``: open-loop Poisson at the calibrated
#: rate; idle is the workload's low-load rate, dynbranch Fig. 8); ``serial`` is the closed loop
#: of one (Table 2's setting).
LOADS: dict[str, tuple[str, str | None]] = {
    "idle": ("poisson", "idle"), "busy": ("poisson", "busy"),
    "saturated": ("poisson", "saturated"), "serial": ("serial", None)}
#: Per matrix: ``bench arms``'s mode (quick: its quick arms on 2 engines; full: every arm on 4),
#: seeds and workflows per cell, the loads, and the loads run once (one seed) per workload.
MATRICES: dict[str, dict[str, Any]] = {
    "quick": {"quick": True, "seeds": 1, "loads": ("idle",), "workflows": 24},
    "full": {"quick": False, "seeds": 5, "loads": ("idle", "busy", "saturated"), "workflows": 48,
             #: the closed loop once per workload and profile: Table 2's setting, C2 beside C1
             "once": ("serial",)}}
#: Per-cell options of the full matrix: every arm, on the full mode's four engines.
FULL_CELL: dict[str, Any] = {"engines": 4}
#: The full matrix's replay-rate sweep (Figure 10): one workload under floor and full.
SWEEP_WORKLOAD = "react"
REPLAY_RATES = (0.22, 0.5, 0.77)
REPLAY_CELL: dict[str, Any] = {"arms": ("floor", "full"), "workflows": 48, "seeds": 2,
                               **FULL_CELL}
#: The C3 study's load levels for Routing and ReAct (``--only c3``; the full matrix has idle,
#: busy and saturated of its own), and the workloads it runs at idle only.
C3_LEVELS = ("idle", "moderate", "busy", "saturated")
C3_IDLE_ONLY = ("subagent", "hci")


def cell_options(load: str, profile: str, matrix: str) -> dict[str, Any]:
    """The keyword arguments of ``bench arms``'s ``run`` (after its mode) for one cell."""
    spec = MATRICES[matrix]
    serial = load in spec.get("once", ())
    arrival, level = LOADS[load]
    options: dict[str, Any] = {"seed": 0, "arrival": arrival, "workflows": spec["workflows"],
                               "profile": profile, "seeds": 1 if serial else spec["seeds"]}
    if level is not None:
        options["load"] = level
    if not spec["quick"]:
        options.update(FULL_CELL, arms=ALL_ARMS)
    return options


__all__ = ["C3_IDLE_ONLY", "C3_LEVELS", "FULL_CELL", "LOADS", "MATRICES", "REPLAY_CELL",
           "REPLAY_RATES", "SWEEP_WORKLOAD", "cell_options"]
