"""The launcher's children: one that dies before announcing is reported with how it ended, and
a restart tries again like a supervisor. A supervising mesh restarts a child that exits on its
own, leaves one killed on purpose to its killer, gives up on a crash loop, and stops without a
restart racing it. A clean stop removes the mesh's own run folder unless it is to be kept; the
operator's environment wins over the launcher's defaults."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from services.launcher import ProcessMesh, RestartPolicy, gateway_index, launch_env

QUICK = RestartPolicy(backoff_s=0.05, max_backoff_s=0.1)


async def _until(predicate: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


async def test_a_child_killed_before_it_announces_is_named_with_its_signal() -> None:
    mesh = ProcessMesh()
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
    mesh = ProcessMesh()
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


async def test_a_supervised_child_that_exits_is_restarted_on_its_port_until_killed_on_purpose(
        tmp_path: Path) -> None:
    # a restart keeps the run folder: tmp_path
    mesh = ProcessMesh(run_dir=tmp_path, supervise=QUICK)
    counter = tmp_path / "starts"
    try:
        first = await mesh.spawn("flaky", "tests.launcher_flaky", ["--counter", str(counter)])
        os.kill(first.process.pid, signal.SIGKILL)  # a crash: nobody asked for it
        # start 2 dies by SIGKILL before announcing (one more restart), start 3 serves
        await _until(lambda: mesh.child("flaky").process.pid != first.process.pid)
        again = mesh.child("flaky")
        assert again.address == first.address and counter.read_text() == "3"
        # asyncio reports 255 for a child that dies before its watcher sees it (as above)
        assert mesh.restarts[0] == "flaky: killed by SIGKILL" and len(mesh.restarts) == 2
        assert re.fullmatch(r"flaky: before announcing, (killed by SIGKILL|exit status 255)",
                            mesh.restarts[1]), mesh.restarts
        assert [c.name for c in mesh.children] == ["flaky"]  # in the old one's place
        await mesh.kill("flaky")  # on purpose: a fault test restarts it itself
        await asyncio.sleep(10 * QUICK.max_backoff_s)
        assert mesh.exited() == ["flaky"] and counter.read_text() == "3"
        await mesh.restart("flaky")  # and supervised again
        os.kill(mesh.child("flaky").process.pid, signal.SIGKILL)
        await _until(lambda: counter.read_text() == "5" and not mesh.exited())
    finally:
        await mesh.stop()


async def test_a_crash_loop_is_left_down_after_its_restarts_with_an_error(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    loop = RestartPolicy(backoff_s=0.01, max_backoff_s=0.02, max_restarts=2)
    mesh = ProcessMesh(run_dir=tmp_path, supervise=loop)
    counter = tmp_path / "starts"
    try:
        with caplog.at_level(logging.WARNING, logger="services.launcher"):
            await mesh.spawn("crashy", "tests.launcher_crashy", ["--counter", str(counter)])
            await _until(lambda: mesh.given_up == ["crashy"])
        assert counter.read_text() == "3" and mesh.restarts == ["crashy: exit status 1"] * 2
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warnings[0].startswith("crashy exited (exit status 1); restart 1 of at most 2 "
                                      "in 60 s, in 0.0 s")
        (error,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert error.startswith("crashy exited (exit status 1) after 2 restarts in 60 s; "
                                "leaving it down")
    finally:
        await mesh.stop()


async def test_stop_during_a_back_off_ends_supervision_without_a_restart(tmp_path: Path) -> None:
    mesh = ProcessMesh(run_dir=tmp_path,
                       supervise=RestartPolicy(backoff_s=30.0, max_backoff_s=30.0))
    counter = tmp_path / "starts"
    first = await mesh.spawn("flaky", "tests.launcher_flaky", ["--counter", str(counter)])
    os.kill(first.process.pid, signal.SIGKILL)
    await _until(lambda: mesh.restarts != [])  # the supervisor waits out its back-off
    started = time.monotonic()
    await mesh.stop()
    assert time.monotonic() - started < 5.0 and counter.read_text() == "1"
    assert mesh.children == []


async def test_a_clean_stop_removes_its_own_run_folder_unless_asked_to_keep_it() -> None:
    folders = []
    for keep in (False, True):
        mesh = ProcessMesh(keep_run_dir=keep)
        await mesh.spawn("csl", "services.csl", ["--data-dir", str(mesh.run_dir / "csl")])
        await mesh.stop()
        folders.append(mesh.run_dir)
    assert [folder.exists() for folder in folders] == [False, True]
    shutil.rmtree(folders[1])


def test_the_environment_wins_over_the_launchers_defaults(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    assert launch_env("gateway-2")["DYNBRANCH_GATEWAY_AUTH"] == "false"
    monkeypatch.setenv("DYNBRANCH_GATEWAY_HTTP_PORT", "8080")
    assert launch_env("gateway")["DYNBRANCH_GATEWAY_HTTP_PORT"] == "8080"
    assert "DYNBRANCH_GATEWAY_AUTH" not in launch_env("csl-0")
    assert [gateway_index(n) for n in ("gateway", "gateway-3", "csl-1", "gatewayx")] == [
        0, 3, -1, -1]
