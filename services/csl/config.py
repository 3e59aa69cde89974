"""csl settings (env prefix ``DYNBRANCH_CSL_``)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from services.common.values.config import ServiceSettings
from services.csl.core import LibraryOptions

MiB = 1 << 20
#: The library's defaults, the one copy the settings below take theirs from.
_LIB = LibraryOptions()


class CslSettings(ServiceSettings):
    """Settings of the Completed-Subgraph Library service."""

    env_prefix: ClassVar[str] = "DYNBRANCH_CSL_"

    data_dir: str = Field("dynbranch-csl", min_length=1,
                          description="LMDB environment directory (relative to the working dir)")
    create: bool = Field(_LIB.create, description=(
        "create the store when the directory is new or empty; never over existing data"))
    budget_bytes: int = Field(_LIB.budget_bytes, ge=4096,
                              description="byte budget of confirmed entries")
    shadow_budget_bytes: int = Field(_LIB.shadow_budget_bytes, ge=0,
                                     description="bytes of shadows held in memory")
    shadow_ttl_s: float = Field(_LIB.shadow_ttl_s, gt=0, le=86_400,
                                description="default lifetime of an unclaimed shadow")
    expire_interval_s: float = Field(1.0, gt=0, le=3600,
                                     description="how often expired shadows are swept")
    map_size_bytes: int = Field(_LIB.map_size, ge=0,
                                description="LMDB map size; 0: max(1 GiB, 4 x budget)")
    sync: bool = Field(_LIB.sync, description=(
        "fsync every commit (off: a machine crash may lose the last commits; a process crash "
        "loses nothing)"))
    max_result_bytes: int = Field(4 * MiB, ge=1, description="largest result accepted")
    serving_lease_s: float = Field(0.0, ge=0, le=3600, description=(
        "serving lease of a shard (one of several libraries): it serves hits only this long "
        "after a renewal copied its peers' changes in; 0: not a shard, always serves"))

    @model_validator(mode="after")
    def _map_fits_budget(self) -> CslSettings:
        if self.map_size_bytes and self.map_size_bytes < 2 * self.budget_bytes:
            raise ValueError("map_size_bytes must be 0 or at least twice budget_bytes")
        return self

    def library_options(self) -> LibraryOptions:
        """Options of the library this service opens."""
        return LibraryOptions(
            budget_bytes=self.budget_bytes, shadow_budget_bytes=self.shadow_budget_bytes,
            shadow_ttl_s=self.shadow_ttl_s, create=self.create, map_size=self.map_size_bytes,
            sync=self.sync)


__all__ = ["CslSettings"]
