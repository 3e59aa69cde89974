"""Where a report's numbers came from: the commit of the code that ran them and when."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

#: The checkout this package runs from (its parent folder), if it is one.
ROOT = Path(__file__).resolve().parents[2]
UNKNOWN = "unknown"


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                          timeout=10, check=True).stdout.strip()


def commit(root: Path = ROOT) -> str:
    """``git rev-parse HEAD`` of ``root``, with ``-dirty`` when a tracked file differs from it
    (the run is then not the commit's; untracked files do not count, as in ``git describe
    --dirty``: notes and outputs lying about change no code that ran); ``unknown`` when ``root``
    is not the top of a git checkout (an installed package) or git is absent."""
    try:
        if Path(_git(root, "rev-parse", "--show-toplevel")).resolve() != root.resolve():
            return UNKNOWN  # a checkout above an installed copy is not what ran
        head = _git(root, "rev-parse", "HEAD")
        dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    return head + ("-dirty" if dirty else "")


def utc_now() -> str:
    """The date and time in UTC, ISO 8601 to the second: ``2025-01-31T12:00:00+00:00``."""
    return datetime.now(UTC).isoformat(timespec="seconds")


__all__ = ["UNKNOWN", "commit", "utc_now"]
