"""Errors of the csl service, on top of the mesh tree in ``services.common.values.errors``.

    FailedPrecondition
    └── StoreError(path, msg)          the LMDB environment cannot be used; names the path
        ├── StoreMissing               no environment where one must exist (create=False)
        ├── StoreCorrupt               not an LMDB file, unreadable pages, undecodable records
        ├── StoreForeign               a readable LMDB environment that is not a csl store
        └── StoreLocked                another process (or library) holds the environment

Start-up raises these instead of recreating the store over existing data.
"""

from __future__ import annotations

from pathlib import Path

from services.common.values.errors import FailedPrecondition


class StoreError(FailedPrecondition):
    """The library's LMDB environment at ``path`` cannot be used."""

    def __init__(self, path: str | Path, message: str) -> None:
        super().__init__(f"csl store {str(path)!r}: {message}")
        self.path = str(path)


class StoreMissing(StoreError):
    """No environment exists at the path and creation was not allowed."""


class StoreCorrupt(StoreError):
    """The environment exists but its files or records cannot be read."""


class StoreForeign(StoreError):
    """The directory holds data that is not a csl store of a known schema."""


class StoreLocked(StoreError):
    """Another process or library instance has the environment open."""


__all__ = ["StoreCorrupt", "StoreError", "StoreForeign", "StoreLocked", "StoreMissing"]
