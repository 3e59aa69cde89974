"""The launcher's children: one that dies before announcing is reported with how it ended, and
a restart tries again like a supervisor."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.launcher import Mesh


async def test_a_child_killed_before_it_announces_is_named_with_its_signal() -> None:
    mesh = Mesh()
    try:
        # asyncio reports 255 for a child that exits before its watcher sees it
        ended = r"\((killed by SIGKILL|exit status \d+)\)"
        with pytest.raises(RuntimeError, match=r"selfkill did not start " + ended):
            await mesh.spawn("selfkill", "tests.launcher_selfkill", [])
        with pytest.raises(RuntimeError, match=r"exiter did not start \(exit status (3|255)\)"):
            await mesh.spawn("exiter", "tests.launcher_exit3", [])
    finally:
        await mesh.stop()


async def test_a_restart_that_dies_before_announcing_is_started_again_and_reported(
        tmp_path: Path) -> None:
    mesh = Mesh()
    counter = tmp_path / "starts"
    try:
        first = await mesh.spawn("flaky", "tests.launcher_flaky", ["--counter", str(counter)])
        await mesh.kill("flaky")
        again = await mesh.restart("flaky")  # start 2 dies by SIGKILL, start 3 serves
        assert again.address == first.address and counter.read_text() == "3"
        assert len(mesh.failed_starts) == 1
        assert "flaky did not start (" in mesh.failed_starts[0]  # its signal or exit status
    finally:
        await mesh.stop()
