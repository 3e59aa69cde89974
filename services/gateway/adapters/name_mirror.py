"""The gateway's mirror of the library's confirmed names (DESIGN.md §6 hop budget).

A demand whose name the mirror does not hold misses without a Lookup round trip. The mirror is
advisory: a name it holds is still looked up (the library checks freshness), and until it is
synced, or after its feed broke, it claims to hold every name so nothing is skipped. Being
behind only costs reuse for a moment, never correctness.
"""

from __future__ import annotations

from collections.abc import Iterable

from services.common.values.reuse_name import ReuseName, name_key


class NameMirror:
    """Confirmed name keys as last reported by the library's feed."""

    def __init__(self) -> None:
        self._names: set[bytes] = set()
        self._next_seq = 0
        self.synced = False
        self.skipped = 0

    def may_hold(self, name: ReuseName) -> bool:
        """False only when the library surely holds no confirmed entry under ``name``."""
        if not self.synced or name_key(name) in self._names:
            return True
        self.skipped += 1
        return False

    def apply(self, seq: int, added: Iterable[bytes], removed: Iterable[bytes],
              synced: bool) -> bool:
        """Apply one feed batch; False (and reset) on a gap in the sequence."""
        if seq != self._next_seq:
            self.reset()
            return False
        self._next_seq = seq + 1
        self._names.update(added)
        self._names.difference_update(removed)
        self.synced = self.synced or synced
        return True

    def add(self, name: ReuseName) -> None:
        """Record a name this gateway just stored or promoted (before its feed event arrives)."""
        self._names.add(name_key(name))

    def reset(self) -> None:
        """Forget everything: back to 'may hold anything' until the next snapshot."""
        self._names.clear()
        self._next_seq = 0
        self.synced = False

    def __len__(self) -> int:
        return len(self._names)


__all__ = ["NameMirror"]
