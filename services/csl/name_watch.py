"""Listeners on a library's confirmed name set: the listener type and the watch methods."""

from __future__ import annotations

import threading
from collections.abc import Callable

from services.csl.entries import EntryMeta

#: Receives confirmed name keys added and removed, on the thread that changed them.
NameListener = Callable[[list[bytes], list[bytes]], None]


class NameWatch:
    """Watching the confirmed name set; a base of ``SubgraphLibrary``, which provides the lock,
    the names and the listener list (its ``ConfirmedSet`` calls the listeners on every change)."""

    _mutex: threading.RLock
    _names: dict[bytes, EntryMeta]
    _listeners: list[NameListener]

    def watch_names(self, listener: NameListener) -> list[bytes]:
        """Call ``listener(added, removed)`` (name keys) on every change of the confirmed set,
        from the mutating thread; returns the current set, consistent with the first call."""
        with self._mutex:
            self._listeners.append(listener)
            return list(self._names)

    def unwatch_names(self, listener: NameListener) -> None:
        """Stop calling ``listener``."""
        with self._mutex:
            if listener in self._listeners:
                self._listeners.remove(listener)


__all__ = ["NameListener", "NameWatch"]
