"""The admission service's small durable store: what the priced controller learned (gate models,
selection and usability posteriors, gains, costs), kept in one JSON file so a restart does not
start cold. Writes are atomic (a temporary file in the same folder, fsynced, then renamed over
the old one), so a crash mid-write leaves the previous state; a file that is not a state is a
clear error at start, never silently dropped.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from services.common.values.errors import InvalidArgument


def load(path: str | Path) -> dict[str, Any] | None:
    """The saved state, or None when no file exists yet."""
    p = Path(path)
    if not p.exists():
        return None
    try:
        state = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidArgument(
            "state_path", f"{p} is not a readable admission state: {exc}") from None
    if not isinstance(state, dict):
        raise InvalidArgument("state_path", f"{p} is not an admission state (not an object)")
    return state


def save(path: str | Path, state: dict[str, Any]) -> None:
    """Replace the file at ``path`` with ``state``, atomically."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(state, out, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


__all__ = ["load", "save"]
