"""Settings of a ``SubgraphLibrary``: sizes, lifetimes and LMDB options."""

from __future__ import annotations

from dataclasses import dataclass

from services.common.values.errors import InvalidArgument
from services.csl.store import StoreOptions

MiB = 1 << 20


@dataclass(frozen=True, slots=True)
class LibraryOptions:
    """Sizes, lifetimes and storage settings of a library."""

    budget_bytes: int = 256 * MiB
    shadow_budget_bytes: int = 64 * MiB
    shadow_ttl_s: float = 60.0
    create: bool = True
    #: LMDB map size; 0 picks max(1 GiB, 4 x budget). Must leave room for page overhead.
    map_size: int = 0
    sync: bool = True

    def __post_init__(self) -> None:
        if self.budget_bytes <= 0:
            raise InvalidArgument("budget_bytes", "must be positive")
        if self.shadow_budget_bytes < 0 or not self.shadow_ttl_s > 0:
            raise InvalidArgument("shadow_ttl_s", "must be positive")
        if self.map_size and self.map_size < 2 * self.budget_bytes:
            raise InvalidArgument("map_size", "must be at least twice budget_bytes")

    def store_options(self) -> StoreOptions:
        """Options for the LMDB environment."""
        map_size = self.map_size or max(1 << 30, 4 * self.budget_bytes)
        return StoreOptions(create=self.create, map_size=map_size, sync=self.sync)


__all__ = ["LibraryOptions", "MiB"]
