"""Rate-limited warnings: a fault that repeats on every call (a csl shard cut off, say) logs
once per ``interval_s`` per key, and the next line says how many were held back, instead of a
line per call (11,919 lines in 185 s through one cut-off gateway, issue 38)."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

#: Seconds between two lines of the same key, and keys remembered at once (oldest forgotten).
INTERVAL_S = 10.0
MAX_KEYS = 1024


class ThrottledLog:
    """``warning(key, msg, *args)`` (or ``log(level, key, ...)``): at most one line per key per
    ``interval_s``; the next line of a key carries ``suppressed``, the count held back since
    its last line."""

    def __init__(self, logger: logging.Logger, interval_s: float = INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger, self.interval_s, self.clock = logger, interval_s, clock
        self._keys: OrderedDict[str, tuple[float, int]] = OrderedDict()

    def warning(self, key: str, msg: str, *args: Any,
                extra: Mapping[str, Any] | None = None) -> bool:
        """Log a warning unless ``key`` logged within ``interval_s``; True when a line was
        written."""
        return self.log(logging.WARNING, key, msg, *args, extra=extra)

    def log(self, level: int, key: str, msg: str, *args: Any,
            extra: Mapping[str, Any] | None = None, exc_info: BaseException | None = None
            ) -> bool:
        """Log at ``level`` (with ``exc_info``'s traceback when given) unless ``key`` logged
        within ``interval_s``; True when a line was written."""
        now = self.clock()
        last = self._keys.get(key)
        if last is not None and now - last[0] < self.interval_s:
            self._keys[key] = (last[0], last[1] + 1)
            return False
        held = last[1] if last is not None else 0
        if held:
            msg += f" ({held} more like it in the last {self.interval_s:g} s)"
        self.logger.log(level, msg, *args, extra={**(extra or {}), "suppressed": held},
                        exc_info=exc_info)
        self._keys[key] = (now, 0)
        self._keys.move_to_end(key)
        while len(self._keys) > MAX_KEYS:
            self._keys.popitem(last=False)
        return True


__all__ = ["INTERVAL_S", "MAX_KEYS", "ThrottledLog"]
