"""The lease provider's settings and tool timing (``leases.state``): a mode outside
``LEASE_MODES`` is refused naming the setting, and tool durations average per tool (the TTL of
the simplified TTL baseline's pins)."""

from __future__ import annotations

import pytest

from services.common.values.errors import InvalidArgument
from services.common.values.leases import ResultKey
from services.engine_agent.leases.state import LEASE_MODES, LeaseSettings, ToolTimes


def test_only_the_known_lease_modes_are_accepted() -> None:
    assert LEASE_MODES == ("lads", "ttl", "continuum", "fixed_ttl", "none")
    for mode in LEASE_MODES:
        assert LeaseSettings(mode=mode).mode == mode
    with pytest.raises(InvalidArgument) as info:
        LeaseSettings(mode="fifo")  # type: ignore[arg-type]
    assert info.value.field == "lease_mode"
    assert "lads, ttl, continuum, fixed_ttl, none" in str(info.value)


def test_tool_durations_average_per_tool_and_unknown_calls_are_ignored() -> None:
    tools = ToolTimes(alpha=0.5)
    assert tools.expected("search") is None
    tools.started(ResultKey("wf", 1), "search", at=0.0)
    tools.finished(ResultKey("wf", 1), at=2.0)
    tools.started(ResultKey("wf", 2), "search", at=10.0)
    tools.finished(ResultKey("wf", 2), at=14.0)
    tools.finished(ResultKey("wf", 3), at=20.0)  # never started here
    assert tools.expected("search") == pytest.approx(3.0)  # 0.5 * 4 + 0.5 * 2
    tools.started(ResultKey("wf", 4), "search", at=0.0)
    tools.forget(ResultKey("wf", 4))
    tools.finished(ResultKey("wf", 4), at=100.0)
    assert tools.expected("search") == pytest.approx(3.0)
