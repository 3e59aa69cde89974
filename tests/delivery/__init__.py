"""Tests of the LADS delivery sender, and the small factories they share.

The factories live here rather than in a ``factories.py`` so the package stays within the files
this change owns; they build frames, lease and budget records for one engine, ``ENGINE``.
"""

from __future__ import annotations

from services.common.values.leases import (
    BudgetRecord,
    LeaseRecord,
    LeaseState,
    ResultKey,
    prefix_digest,
)
from services.delivery.frames import Frame

ENGINE = "engine-0"
RATE = 4000.0  # bytes/s: 32 kbit/s, the paper's return link
FRAMING = 1028


class FakeClock:
    """A settable clock: ``clock()`` returns ``clock.t``."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def key(i: int) -> ResultKey:
    """The result key of workflow ``i``'s first tool result."""
    return ResultKey(f"wf{i:03d}", 1)


def frame(i: int, *, size: int = 3000, ready_at: float = 0.0, resident: int = 0,
          prompt: int = 1000, tool: str = "", engine: str = ENGINE,
          fill: int | None = None) -> Frame:
    """Workflow ``i``'s result frame: ``size`` payload bytes, ``resident`` cached blocks."""
    payload = bytes([(i if fill is None else fill) % 256]) * size
    return Frame.build(key(i), engine, payload, ready_at=ready_at, prompt_tokens=prompt,
                       resident_blocks=resident, prefix_digest=prefix_digest([f"wf{i}"]),
                       tool=tool)


def budget(generation: int = 1, *, at: float = 0.0, capacity: int = 100, protected: int = 0,
           denied: tuple[ResultKey, ...] = (), waiting: int = 0, running: int = 0,
           max_running: int = 8, kappa_s: float = 0.05, engine: str = ENGINE) -> BudgetRecord:
    """A budget record; by default no pressure and an idle engine."""
    return BudgetRecord(engine, generation, at, target=capacity, protected=protected,
                        capacity=capacity, free_blocks=1000, headroom=100, demand=capacity,
                        denied=denied, waiting=waiting, running=running,
                        max_running=max_running, kappa_s=kappa_s)


def lease(f: Frame, *, sequence: int = 1, at: float = 0.0, generation: int = 1,
          state: LeaseState = LeaseState.ACTIVE, exclusive: int = 10, blocks: int = 20,
          deadline: float = 8.0, granted_at: float = 0.0, engine: str | None = None,
          payload_digest: str | None = None, prefix: str | None = None) -> LeaseRecord:
    """A lease record matching frame ``f`` unless a field is overridden."""
    return LeaseRecord(engine or f.engine_id, f.key, sequence, at,
                       prefix if prefix is not None else f.prefix_digest,
                       payload_digest if payload_digest is not None else f.payload_digest,
                       generation, state, blocks, exclusive, granted_at, deadline)
