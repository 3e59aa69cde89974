"""The run's clock: the running event loop's time, in seconds.

Durations a service decides by (branch TTLs and windows, fill waits, setup times, record ages,
the admission window H) are read from this clock, never from ``time.monotonic()`` directly. A
service on a normal loop gets the monotonic clock; the experiment mesh on a virtual clock
(``loadgen.meshes.virtual``) gets simulated seconds, so every such setting means the same thing in
both. Outside a running loop (plain values built in a test) it falls back to the monotonic
clock, which is what a default loop's clock is.
"""

from __future__ import annotations

import asyncio
import time


def now() -> float:
    """Seconds on the running loop's clock (``time.monotonic()`` outside a loop)."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()


__all__ = ["now"]
