"""Shared fixtures: real gRPC servers on ephemeral loopback ports."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("DYNBRANCH_TEST", "1")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
