"""Shared fixtures: real gRPC servers on ephemeral loopback ports; and a hang report.

pytest-timeout fails a test (setup, call and teardown together) that runs past its ``timeout``
(pyproject's, or its own ``timeout`` mark). Shortly before that, every running event loop's tasks
are printed with their stacks to the real stderr, so that a hang says what it waits on: the
timeout's own report shows only threads, and an asyncio hang has every thread idle.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
from collections.abc import Iterator

import pytest

os.environ.setdefault("DYNBRANCH_TEST", "1")

#: Seconds before a test's timeout at which its loops' tasks are printed.
_DUMP_AHEAD_S = 15.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _print_tasks(loop: asyncio.AbstractEventLoop, test: str) -> None:
    out = sys.__stderr__
    tasks = asyncio.all_tasks(loop)
    print(f"\n=== {test}: still running near its timeout; {len(tasks)} tasks ===", file=out)
    for task in tasks:
        print(f"--- {task!r}", file=out)
        task.print_stack(limit=25, file=out)
    out.flush()


def _dump_running_loops(test: str) -> None:
    loops = [o for o in gc.get_objects()
             if isinstance(o, asyncio.AbstractEventLoop) and o.is_running()]
    for loop in loops:
        loop.call_soon_threadsafe(_print_tasks, loop, test)


def _timeout_of(item: pytest.Item) -> float:
    mark = item.get_closest_marker("timeout")
    if mark is not None and mark.args:
        return float(mark.args[0])
    return float(item.config.getini("timeout") or 0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    timeout = _timeout_of(item)
    timer = None
    if timeout > _DUMP_AHEAD_S:
        timer = threading.Timer(timeout - _DUMP_AHEAD_S, _dump_running_loops, (item.nodeid,))
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
