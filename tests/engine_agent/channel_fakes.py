"""The lease channel without vLLM: the plugin's real channel server (``dynbranch_vllm_plugin.
channel``) forwarding to the plugin's real utilities over the fake engine core of
``vllm_plugin_fakes``, on an ``ipc://`` socket in a short temporary folder."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from dynbranch_vllm_plugin import engine_core as plugin
from dynbranch_vllm_plugin.channel import ChannelServer

from tests.engine_agent.vllm_plugin_fakes import make_core, plain_hashes


class FakeEngineCore:
    """What ``AsyncLLM.engine_core.call_utility_async`` does, over the fake engine core: run the
    utility (between steps, here: at once) and await a Future it answers with."""

    def __init__(self, blocks: int = 16) -> None:
        self.core, self.pool = make_core(blocks)
        self.calls: list[str] = []

    async def call_utility_async(self, name: str, *args: Any) -> Any:
        self.calls.append(name)
        result = plugin.UTILITIES[name](self.core, *args)
        if isinstance(result, Future):
            return await asyncio.wrap_future(result)
        return result


@contextlib.contextmanager
def short_folder() -> Iterator[Path]:
    """A folder whose ipc paths stay under the 107-byte limit of a Unix socket path."""
    path = Path(tempfile.mkdtemp(prefix="dyn-lc-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def use_plain_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Block hashes of the fake engine core (see ``vllm_plugin_fakes.plain_hashes``)."""
    monkeypatch.setattr(plugin, "_block_hashes", plain_hashes)


@contextlib.asynccontextmanager
async def serving(endpoint: str, engine: FakeEngineCore | None = None
                  ) -> AsyncIterator[tuple[ChannelServer, FakeEngineCore]]:
    """The channel server at ``endpoint`` over ``engine`` (a fresh fake one by default)."""
    engine = engine or FakeEngineCore()
    server = ChannelServer(endpoint, engine.call_utility_async)
    server.start()
    try:
        yield server, engine
    finally:
        server.close()
