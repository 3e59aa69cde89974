"""Jepsen-style: two gateways over three csl shards and one corpus, as processes; gateway A is
cut off from shard csl-1 (connections refused, then black-holed), healed mid-run, and csl-1 is
restarted on its own store and later on an older copy of it. Records and documents are rewritten
through A while both gateways retrieve (B serving library hits) and a library port like B's
probes the shards directly: after every acknowledged write, 0 stale answers, 0 stale library
entries and 0 errors (``loadgen/faults/partition.py``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loadgen.faults.partition import PHASES, partition_check


def _assert_clean(report: dict, checks: int) -> None:
    assert report["failures"] == []
    assert report["checks"] >= checks and report["library_checks"] >= checks
    assert report["stale"] == 0 and report["library_stale"] == 0
    assert report["errors"] == 0 and report["write_errors"] == 0
    phases = report["phases"]
    assert list(phases) == [name for _, name in PHASES]
    for name, row in phases.items():  # every phase checked, after writes of both kinds
        assert row["checks"] > 0 and row["library_checks"] >= 3, name
        assert row["writes"] >= 3 and row["record_writes"] >= 3, name
    for cut in ("A refused by csl-1", "A black-holed from csl-1"):  # the fault acted: A's
        assert phases[cut]["write_p50_ms"] >= 1000 * report["lease_s"]  # writes waited


async def test_no_stale_answer_through_either_gateway_under_a_one_sided_partition(
        tmp_path: Path) -> None:
    checks = int(os.environ.get("DYNBRANCH_PARTITION_CHECKS", "300"))
    _assert_clean(await partition_check(tmp_path, checks), checks)


@pytest.mark.slow
async def test_three_thousand_checks_under_a_one_sided_partition(tmp_path: Path) -> None:
    _assert_clean(await partition_check(tmp_path, 3000), 3000)
