"""Result frames and one engine's inventory of ready, uncommitted frames (LADS §2.1, §3.1).

A frame is one completed tool result on its way back to the engine that owns its history: the
payload, its digest, the cache hint the engine exposed at readiness, and the continuation request
it resumes (opaque here). The inventory keeps one engine's ready, uncommitted frames in FIFO
ready order, (ready_at, key), the order the budget estimate and the lease provider read.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass, field

from services.common.values.leases import ResultKey, digest


@dataclass(frozen=True, slots=True)
class Frame:
    """One application-layer result frame: payload, identity and the engine's cache hint."""

    key: ResultKey
    engine_id: str
    payload: bytes = field(repr=False)
    payload_digest: str
    ready_at: float
    prompt_tokens: int
    resident_blocks: int
    prefix_digest: str
    tool: str = ""
    continuation: object | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.payload_digest != digest(self.payload):
            raise ValueError(f"payload_digest does not match the payload of {self.key}")
        if self.prompt_tokens < 0:
            raise ValueError(f"prompt_tokens must be >= 0, got {self.prompt_tokens}")
        if self.resident_blocks < 0:
            raise ValueError(f"resident_blocks must be >= 0, got {self.resident_blocks}")

    @classmethod
    def build(cls, key: ResultKey, engine_id: str, payload: bytes, *, ready_at: float,
              prompt_tokens: int, resident_blocks: int, prefix_digest: str, tool: str = "",
              continuation: object | None = None) -> Frame:
        """A frame whose ``payload_digest`` is computed from ``payload``."""
        return cls(key, engine_id, payload, digest(payload), ready_at, prompt_tokens,
                   resident_blocks, prefix_digest, tool, continuation)

    @property
    def size(self) -> int:
        """Payload bytes p_i (framing excluded)."""
        return len(self.payload)


def _order(frame: Frame) -> tuple[float, ResultKey]:
    return (frame.ready_at, frame.key)


class Inventory:
    """One engine's ready, uncommitted frames in FIFO order (ready_at, key)."""

    __slots__ = ("_by_key", "_order", "_frames")

    def __init__(self) -> None:
        self._by_key: dict[ResultKey, Frame] = {}
        self._order: list[tuple[float, ResultKey]] = []
        self._frames: list[Frame] = []

    def add(self, frame: Frame) -> bool:
        """Insert ``frame``; False if the same key and payload is already held.

        Raises ValueError (naming ``payload_digest``) when the key is held with another payload:
        one result identity has exactly one payload.
        """
        held = self._by_key.get(frame.key)
        if held is not None:
            if held.payload_digest != frame.payload_digest:
                raise ValueError(f"payload_digest of {frame.key} differs from the held frame's")
            return False
        at = bisect.bisect_right(self._order, _order(frame))
        self._order.insert(at, _order(frame))
        self._frames.insert(at, frame)
        self._by_key[frame.key] = frame
        return True

    def remove(self, key: ResultKey) -> Frame | None:
        """Drop and return the frame for ``key`` (None if not held)."""
        frame = self._by_key.pop(key, None)
        if frame is not None:
            at = self._index(frame)
            del self._order[at]
            del self._frames[at]
        return frame

    def get(self, key: ResultKey) -> Frame | None:
        """The held frame for ``key``, if any."""
        return self._by_key.get(key)

    def position(self, key: ResultKey) -> int:
        """ν_i: the number of frames ahead of ``key`` in FIFO order (KeyError if not held)."""
        return self._index(self._by_key[key])

    def frames(self) -> tuple[Frame, ...]:
        """The held frames in FIFO order."""
        return tuple(self._frames)

    def _index(self, frame: Frame) -> int:
        return bisect.bisect_left(self._order, _order(frame))

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def __iter__(self) -> Iterator[Frame]:
        return iter(tuple(self._frames))

    def __len__(self) -> int:
        return len(self._frames)


__all__ = ["Frame", "Inventory"]
