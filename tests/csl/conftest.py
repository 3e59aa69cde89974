"""Fixtures for csl tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from services.csl.core import SubgraphLibrary
from tests.csl.factories import FakeClock, library


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def lib(tmp_path: Path, clock: FakeClock) -> Iterator[SubgraphLibrary]:
    with library(tmp_path / "csl", clock) as opened:
        yield opened
