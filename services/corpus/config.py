"""Corpus service settings (env prefix ``DYNBRANCH_CORPUS_``)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator

from services.common.values.config import ServiceSettings
from services.corpus.core import MAP_SIZE, REFRESH_FRACTION
from services.corpus.loaders import LOADERS
from services.corpus.service import LEASE_S


class CorpusSettings(ServiceSettings):
    """Settings of the corpus service."""

    env_prefix: ClassVar[str] = "DYNBRANCH_CORPUS_"

    path: str = Field("dynbranch-corpus", min_length=1, description=(
        "LMDB folder of the corpus (relative to the working dir); created when new, and opened "
        "by this process alone"))
    name: str = Field("corpus", min_length=1, max_length=64, pattern=r"^[^/]+$", description=(
        "corpus name (record ids are corpus/<name>/...); an existing folder must hold this name"))
    source: str = Field("", description=(
        "data set loaded into the corpus while it is empty (a loader of services/corpus/"
        "loaders.py: hotpotqa, musique, magento); empty: none (documents arrive through the "
        "gateways' writes)"))
    data_dir: str = Field("", description=(
        "folder of the shared data sets; empty: $DYNBRANCH_DATA_DIR, else ../shared/data"))
    create: bool = Field(True, description="create the corpus when the folder is new")
    sync: bool = Field(True, description=(
        "fsync every commit (off: a machine crash may lose the last writes)"))
    map_size_bytes: int = Field(MAP_SIZE, ge=1 << 20, description="LMDB map size")
    refresh_fraction: float = Field(REFRESH_FRACTION, gt=0, le=100, description=(
        "the statistics snapshot (and so every cached search) refreshes once the writes since "
        "the last one exceed this fraction of the documents"))
    write_lease_s: float = Field(LEASE_S, gt=0, le=600, description=(
        "a write ticket neither committed nor aborted within this many seconds lapses and the "
        "write turn passes on (a gateway that died between the csl and the commit)"))
    max_k: int = Field(50, ge=1, le=1000, description="most documents one search returns")

    @field_validator("source")
    @classmethod
    def _known_source(cls, value: str) -> str:
        if value and value not in LOADERS:
            raise ValueError(f"no loader {value!r} (have: {', '.join(sorted(LOADERS))})")
        return value


__all__ = ["CorpusSettings"]
