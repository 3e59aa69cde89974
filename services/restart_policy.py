"""When a supervisor restarts a service that exited on its own, and when it stops trying: a
pure policy (no processes, no clock of its own), used by ``services.launcher.ProcessMesh``."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """How a supervising ``ProcessMesh`` restarts a child that exited on its own (Kubernetes'
    ``restartPolicy: Always`` with its CrashLoopBackOff, on a local clock): the n-th restart
    within ``window_s`` waits ``backoff_s * 2**(n-1)`` s, at most ``max_backoff_s``; a child
    that would need more than ``max_restarts`` in the window is left down with an ERROR (a crash
    loop is a bug to read in its log, and the rest of the mesh keeps serving around it)."""

    backoff_s: float = 0.5
    max_backoff_s: float = 10.0
    max_restarts: int = 5
    window_s: float = 60.0
    #: Seconds a restarted child has to report SERVING once it announced.
    ready_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        valid = {"backoff_s >= 0": self.backoff_s >= 0,
                 "max_backoff_s >= backoff_s": self.max_backoff_s >= self.backoff_s,
                 "max_restarts >= 1": self.max_restarts >= 1, "window_s > 0": self.window_s > 0,
                 "ready_timeout_s > 0": self.ready_timeout_s > 0}
        if broken := [rule for rule, holds in valid.items() if not holds]:
            raise ValueError(f"RestartPolicy needs {', '.join(broken)}")

    def delay(self, recent: int) -> float:
        """Pause before a restart that is the ``recent``-th within the window (1 = the first)."""
        return min(self.max_backoff_s, self.backoff_s * 2.0 ** (recent - 1))


class RestartBudget:
    """One child's restarts within its policy's window."""

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self._times: deque[float] = deque()

    @property
    def recent(self) -> int:
        """Restarts counted in the window as of the last ``take``."""
        return len(self._times)

    def take(self, now: float) -> float | None:
        """Count a restart at ``now`` and return the pause before it; None past the limit."""
        while self._times and now - self._times[0] >= self.policy.window_s:
            self._times.popleft()
        if len(self._times) >= self.policy.max_restarts:
            return None
        self._times.append(now)
        return self.policy.delay(len(self._times))


__all__ = ["RestartBudget", "RestartPolicy"]
