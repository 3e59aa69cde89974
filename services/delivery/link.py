"""The paced serial return link to one engine, as timing logic on an injected clock (LADS §4, §5.1).

Committed frames cross the link one at a time in commit order: a frame starts when it is committed
or when the previous frame has been fully received, whichever is later, and takes (h + p_i) / R
seconds. The transport window bounds the frames committed but not yet fully received. Nothing
here sleeps or sends; the sender turns the receipt times into timers. Calls pass a non-decreasing
``now``: commit drops what was received before it.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from services.delivery.frames import Frame

#: The paper's framing: a 1024-byte fixed metadata header plus a 4-byte length prefix (§5.1).
DEFAULT_FRAMING_BYTES = 1028
DEFAULT_WINDOW = 4


@dataclass(frozen=True, slots=True)
class Transfer:
    """One committed frame on the link: commit time s_i, transfer start and receipt time c_i."""

    frame: Frame
    committed_at: float
    start: float
    receipt: float
    wire_bytes: int


class PacedLink:
    """A serial FIFO link of rate R bytes/s with h framing bytes per frame and a frame window."""

    __slots__ = ("bytes_per_s", "framing_bytes", "window", "_transfers")

    def __init__(self, bytes_per_s: float, framing_bytes: int = DEFAULT_FRAMING_BYTES,
                 window: int = DEFAULT_WINDOW) -> None:
        if not (bytes_per_s > 0 and math.isfinite(bytes_per_s)):
            raise ValueError(f"bytes_per_s must be a finite rate > 0, got {bytes_per_s!r}")
        if window < 1:
            raise ValueError(f"window must be >= 1 frame, got {window!r}")
        if framing_bytes < 0:
            raise ValueError(f"framing_bytes must be >= 0, got {framing_bytes!r}")
        self.bytes_per_s = float(bytes_per_s)
        self.framing_bytes = int(framing_bytes)
        self.window = int(window)
        self._transfers: deque[Transfer] = deque()

    def duration(self, payload_bytes: int) -> float:
        """Seconds one frame of ``payload_bytes`` occupies the link: (h + p) / R."""
        return (self.framing_bytes + payload_bytes) / self.bytes_per_s

    def commit(self, frame: Frame, now: float) -> float:
        """Queue ``frame`` behind the committed ones and return its complete-receipt time c_i.

        Raises RuntimeError when the window is full: the caller checks ``has_room`` first.
        """
        self._prune(now)
        if not self.has_room(now):
            raise RuntimeError(f"link window of {self.window} frames is full at {now}")
        start = self.busy_until(now)
        wire = self.framing_bytes + frame.size
        receipt = start + wire / self.bytes_per_s
        self._transfers.append(Transfer(frame, now, start, receipt, wire))
        return receipt

    def busy_until(self, now: float) -> float:
        """When the last committed frame is fully received (``now`` if the link is idle)."""
        return max(now, self._transfers[-1].receipt) if self._transfers else now

    def in_flight(self, now: float) -> tuple[Transfer, ...]:
        """Committed frames not fully received at ``now``, in commit order."""
        return tuple(t for t in self._transfers if t.receipt > now)

    def has_room(self, now: float) -> bool:
        """Whether fewer than ``window`` frames are committed but not received at ``now``."""
        return len(self.in_flight(now)) < self.window

    def backlog_bytes(self, now: float) -> float:
        """Q_B: committed bytes (framing included) not yet received, a partial frame's remainder."""
        total = 0.0
        for t in self.in_flight(now):
            if t.start >= now:
                total += t.wire_bytes
            else:
                total += (t.receipt - now) * self.bytes_per_s
        return total

    def next_receipt(self, now: float = -math.inf) -> float | None:
        """The earliest receipt time after ``now`` (None when nothing is in flight)."""
        pending = [t.receipt for t in self._transfers if t.receipt > now]
        return min(pending) if pending else None

    def _prune(self, now: float) -> None:
        while self._transfers and self._transfers[0].receipt <= now:
            self._transfers.popleft()


__all__ = ["DEFAULT_FRAMING_BYTES", "DEFAULT_WINDOW", "PacedLink", "Transfer"]
