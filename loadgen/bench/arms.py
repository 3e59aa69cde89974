"""``dynbranch bench arms``: one workload's schedule under the floor, C1, C2 and full arms.

Side by side in one run (DESIGN.md §6): the same workflow instances with the same open-loop
Poisson arrivals (the paper's low-load rate, dynbranch Fig. 8) run under each arm on a fresh
in-process mesh of simulated ``qwen3-32b-h200`` engines. Per arm it prints the mean and p99
latency in simulated seconds (HCI: the user turn after the click), the ratio to the floor, the
gateway's fill counters per request, and whether every workflow's outputs equal the floor's
(value equivalence, DESIGN.md §5.1).

The workload is ``run(quick, workload=...)`` (``dynbranch bench arms --workload NAME``; default
``routing``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from loadgen.arms import MeshConfig, run_arms, summarize
from loadgen.workloads import DataUnavailable, build_schedule, get_workload

PRESET = "qwen3-32b-h200"
#: Low-load arrival rates per simulated second (dynbranch Fig. 8: 0.12 req/s, HCI 0.3).
RATES = {"routing": 0.12, "react": 0.12, "subagent": 0.12, "hci": 0.3}
#: (workflows, engines, time scale) per mode; quick finishes in under a minute on 2 cores.
MODES = {True: (12, 2, 0.05), False: (48, 4, 0.1)}


def _config(quick: bool) -> tuple[int, MeshConfig]:
    workflows, engines, time_scale = MODES[quick]
    return workflows, MeshConfig(engines=engines, preset=PRESET, time_scale=time_scale)


async def _run(quick: bool, workload_name: str, seed: int, arrival: str,
               rate: float | None) -> dict[str, Any]:
    workflows, config = _config(quick)
    workload = get_workload(workload_name)
    rate = rate if rate is not None else RATES.get(workload_name, 0.12)
    schedule = build_schedule(workload, workflows, seed=seed, arrival=arrival, rate=rate)
    arms = await run_arms(workload, schedule, config)
    summary = summarize(arms)
    return {
        "workload": workload_name, "preset": PRESET, "simulated": True,
        "engines": config.engines, "time_scale": config.time_scale, "workflows": workflows,
        "arrival": arrival, "rate_per_s": rate if arrival == "poisson" else None, "seed": seed,
        "top_k": config.top_k, "schedule_digest": schedule.digest(),
        "latency": "post_click" if workload.post_click_latency else "end_to_end",
        "arms": summary,
        "outputs_equal_floor": all(a["outputs_equal_floor"] for a in summary.values()),
    }


def run(quick: bool, workload: str | None = None, *, seed: int = 0, arrival: str = "poisson",
        rate: float | None = None) -> dict[str, Any]:
    """Run the benchmark, print a readable table, return the JSON figures."""
    name = workload or "routing"
    # Aborted fills end engine streams mid-span; OpenTelemetry logs each as an error it recovers
    # from ("Failed to detach context"). Keep the table readable.
    logging.getLogger("opentelemetry.context").setLevel(logging.CRITICAL)
    try:
        result = asyncio.run(_run(quick, name, seed, arrival, rate))
    except DataUnavailable as exc:
        print(f"arms: skipped: {exc}")
        return {"workload": name, "preset": PRESET, "simulated": True, "skipped": str(exc)}
    _print(result)
    return result


def _print(result: dict[str, Any]) -> None:
    load = (f"open-loop Poisson {result['rate_per_s']}/s" if result["arrival"] == "poisson"
            else "serial closed loop")
    print(f"arms: {result['workload']}, {result['workflows']} workflows, {load}, "
          f"{result['engines']} x {result['preset']} at time scale {result['time_scale']} "
          f"(SIMULATED engine; latency in simulated s, {result['latency'].replace('_', ' ')})")
    print(f"  {'arm':<6} {'mean_s':>8} {'p99_s':>8} {'ratio':>7} {'issued/req':>11} "
          f"{'consumed/req':>13} {'discarded/req':>14}  outputs = floor")
    for name, arm in result["arms"].items():
        print(f"  {name:<6} {arm['mean_s']:>8.3f} {arm['p99_s']:>8.3f} "
              f"{arm['ratio_to_floor']:>7.3f} {arm['fills_issued']:>11.3f} "
              f"{arm['fills_consumed']:>13.3f} {arm['fills_discarded']:>14.3f}  "
              f"{'yes' if arm['outputs_equal_floor'] else 'NO'}"
              + (f"  ({arm['errors']} failed)" if arm["errors"] else ""))
    print("  fills per request: issued; consumed (at least one stage promoted); discarded "
          "(lost an exclusive branch)")


__all__ = ["RATES", "run"]
