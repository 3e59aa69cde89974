"""The launcher's children: one that dies before announcing is reported with how it ended."""

from __future__ import annotations

import pytest

from services.launcher import Mesh


async def test_a_child_killed_before_it_announces_is_named_with_its_signal() -> None:
    mesh = Mesh()
    try:
        with pytest.raises(RuntimeError, match=r"selfkill did not start \(killed by SIGKILL\)"):
            await mesh.spawn("selfkill", "tests.launcher_selfkill", [])
        with pytest.raises(RuntimeError, match=r"exiter did not start \(exit status 3\)"):
            await mesh.spawn("exiter", "tests.launcher_exit3", [])
    finally:
        await mesh.stop()
