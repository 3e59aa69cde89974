"""Small factories for csl tests: names, read-sets, shadows and libraries on a temp path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from services.common.values.reads import ReadSet, RecordRead, Shadow
from services.common.values.reuse_name import ReuseName, StageFingerprint, reuse_name
from services.csl.core import LibraryOptions, SubgraphLibrary

FP = StageFingerprint("routing", "handler", 1, "test-model", max_tokens=64)


def name(i: int | str = 0, tenant: str = "acme", shared: bool = False) -> ReuseName:
    """A distinct reuse name per ``i``."""
    return reuse_name(tenant, FP, f"rendered input {i}".encode(), shared=shared)


def reads(*pairs: tuple[str, int], producers: tuple[ReuseName, ...] = (),
          complete: bool = True) -> ReadSet:
    """A read-set from ``(record_id, version)`` pairs."""
    return ReadSet(tuple(RecordRead(r, v) for r, v in pairs), complete, producers)


def shadow(n: ReuseName, branch: str = "b1", candidate: str = "h1", result: bytes = b"fill",
           read_set: ReadSet | None = None, **kw: Any) -> Shadow:
    """A shadow of a fill for candidate ``candidate`` of ``branch``."""
    return Shadow(name=n, branch_id=branch, candidate=candidate, rank=kw.pop("rank", 0),
                  producer=kw.pop("producer", f"fill-{branch}-{candidate}"), result=result,
                  read_set=read_set or ReadSet.pure(), cost_s=kw.pop("cost_s", 0.5), **kw)


class FakeClock:
    """A monotonic clock tests move by hand."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def library(path: Path, clock: FakeClock | None = None, **options: Any) -> SubgraphLibrary:
    """A library on ``path`` without fsync (tests kill processes, not machines)."""
    options.setdefault("sync", False)
    options.setdefault("map_size", 64 << 20)
    options.setdefault("budget_bytes", 16 << 20)
    return SubgraphLibrary(path, LibraryOptions(**options), clock=clock or FakeClock())
