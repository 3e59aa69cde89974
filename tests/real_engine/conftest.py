"""Fixtures for the real-engine suite: a tiny local model, an embedded vLLM, a vLLM server.

Everything runs on loopback with a random-weight Qwen3-style model built on the spot
(``services.engine_agent.backends.tiny_model``), so no hub is needed. Tests here are marked
``real_engine``; they skip when vLLM is not importable, unless ``DYNBRANCH_REQUIRE_REAL_ENGINE=1``
(CI), where a missing engine fails the run. Install with ``scripts/install_vllm.sh``.

Engines are module-scoped so at most one runs at a time on the 2-core machine.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.engine_agent.backends.tiny_model import build_tiny_model, default_cache_root
from tests.real_engine.engines import require_vllm


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    """The tiny model folder (built once, then cached under .dynbranch/models)."""
    require_vllm()
    return build_tiny_model()


@pytest.fixture(scope="session")
def run_dir() -> Iterator[Path]:
    """A short private folder for sockets and logs (ipc paths must stay under 107 bytes)."""
    path = default_cache_root() / "run" / uuid.uuid4().hex[:8]
    path.mkdir(parents=True)
    yield path
    for child in sorted(path.rglob("*"), reverse=True):
        with contextlib.suppress(OSError):
            child.rmdir() if child.is_dir() else child.unlink()
    with contextlib.suppress(OSError):
        path.rmdir()
