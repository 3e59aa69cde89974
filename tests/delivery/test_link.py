"""The paced return link (``link.PacedLink``, LADS §3.2): a serial FIFO link of rate R with h
framing bytes per frame and a window of frames in flight."""

from __future__ import annotations

import pytest

from services.common.values.leases import ResultKey
from services.delivery.frames import Frame
from services.delivery.link import PacedLink


def frame(i: int, size: int) -> Frame:
    return Frame.build(ResultKey("wf", i), "e0", b"x" * size, ready_at=0.0,
                       prompt_tokens=1, resident_blocks=0, prefix_digest="d")


def test_frames_queue_behind_each_other_at_the_links_rate() -> None:
    link = PacedLink(bytes_per_s=100.0, framing_bytes=10, window=4)
    assert link.duration(90) == pytest.approx(1.0)
    assert link.commit(frame(1, 90), now=0.0) == pytest.approx(1.0)
    assert link.commit(frame(2, 190), now=0.5) == pytest.approx(3.0)  # behind the first
    assert link.backlog_bytes(0.5) == pytest.approx(50 + 200)
    assert link.next_receipt(0.5) == pytest.approx(1.0) and link.busy_until(2.0) == 3.0
    assert link.commit(frame(3, 0), now=5.0) == pytest.approx(5.1)  # idle link: starts now


def test_the_window_bounds_frames_in_flight() -> None:
    link = PacedLink(bytes_per_s=10.0, framing_bytes=0, window=1)
    link.commit(frame(1, 10), now=0.0)
    assert not link.has_room(0.5)
    with pytest.raises(RuntimeError, match="window"):
        link.commit(frame(2, 10), now=0.5)
    assert link.has_room(1.0)
    with pytest.raises(ValueError, match="bytes_per_s"):
        PacedLink(bytes_per_s=0.0)
