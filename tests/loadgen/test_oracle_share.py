"""No arm realizes more than the oracle bound, on any workload (``loadgen.arms.oracle``: the
bound is the earliest finish of the floor's own trace, so a share above 1 means the bound is not
one)."""

from __future__ import annotations

import pytest

from loadgen.bench.arms import run
from loadgen.workloads import WORKLOADS

#: The arms that take most of the bound (every fill admitted, priced, C2 alone) and C1 alone;
#: a few workflows per workload keep the four runs to seconds.
ARMS = ("c1", "c2", "full", "always")
WORKFLOWS = 8


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_no_arm_takes_more_than_the_oracle_bound(workload: str) -> None:
    result = run(True, workload, workflows=WORKFLOWS, arms=ARMS)
    assert result["ok"] and result["oracle"]["bound_s"] > 0
    shares = {name: arm["oracle_share"] for name, arm in result["arms"].items()
              if name != "floor"}
    assert all(share is not None and share <= 1.0 for share in shares.values()), shares
