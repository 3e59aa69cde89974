"""Result frames and an engine's inventory of them (``frames``, LADS §3.2): one payload per
result identity, FIFO order by readiness, ν_i the frames ahead."""

from __future__ import annotations

import pytest

from services.common.values.leases import ResultKey
from services.delivery.frames import Frame, Inventory


def frame(i: int, ready_at: float, payload: bytes = b"p") -> Frame:
    return Frame.build(ResultKey("wf", i), "e0", payload, ready_at=ready_at,
                       prompt_tokens=10, resident_blocks=1, prefix_digest="d")


def test_frames_are_held_in_readiness_order_and_positions_count_those_ahead() -> None:
    inv = Inventory()
    for i, at in ((1, 3.0), (2, 1.0), (3, 2.0)):
        assert inv.add(frame(i, at))
    assert [f.key.turn for f in inv.frames()] == [2, 3, 1]
    assert inv.position(ResultKey("wf", 1)) == 2
    assert inv.remove(ResultKey("wf", 3)) is not None
    assert inv.position(ResultKey("wf", 1)) == 1 and len(inv.frames()) == 2


def test_one_identity_has_one_payload_and_a_bad_digest_is_refused() -> None:
    inv = Inventory()
    assert inv.add(frame(1, 1.0)) and not inv.add(frame(1, 1.0))  # the same frame again
    with pytest.raises(ValueError, match="payload_digest"):
        inv.add(frame(1, 1.0, payload=b"other"))
    with pytest.raises(ValueError, match="payload_digest does not match"):
        Frame(ResultKey("wf", 9), "e0", b"p", "wrong", 0.0, 1, 0, "d")
