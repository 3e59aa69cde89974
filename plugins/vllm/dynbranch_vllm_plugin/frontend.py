"""Opens the lease channel in vLLM's API-server process, when ``DYNBRANCH_LEASE_CHANNEL`` names
its endpoint (e.g. ``ipc:///run/vllm-kv/leases.ipc``); without it nothing here runs.

Where the channel server lives, and why here. The lease utilities must run on the engine core's
busy-loop thread between steps (``engine_core``); a client reaches that thread only through the
engine core's input queue. Two places could host the server:

* the engine-core process: a thread of ours beside the busy loop would have to inject requests
  into its input queue and catch their outputs before vLLM's output thread sends them to the
  API server, which does not know their call ids: a second, unverified path into vLLM's
  internals, in the process whose death is the engine's;
* the API-server process (chosen): ``AsyncLLM`` there already owns the engine core's client, and
  ``engine_core.call_utility_async(name, *args)`` is the path the embedded backend has used and
  verified (``../shared/notes/vllm-cpu.md``: utility calls, Future replies for the exact
  allocation signal, ~4 ms round trips while decoding). The channel server is an asyncio ZMQ
  ROUTER on the API server's own event loop (``channel``), started by a wrapper around
  ``AsyncLLM.__init__`` and closed by one around ``AsyncLLM.shutdown``. The cost is one more
  local hop (agent → API server → engine core), a fraction of a millisecond on ipc.

It opens only in the first API-server process (``client_index`` 0; with ``--api-server-count``
> 1 the others share that engine core) and only without data parallelism (a utility call would
reach one of several engine cores, and leases are per engine core). A channel that cannot open
logs why and the server runs on without it: the agent then falls back to Cache-first.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from dynbranch_vllm_plugin.channel import ChannelServer, check_endpoint

#: Under ``vllm.``: vLLM configures only its own logger (package ``__init__``).
logger = logging.getLogger(f"vllm.{__name__}")

#: The environment variable that names the channel's endpoint; unset or empty: no channel.
ENV_CHANNEL = "DYNBRANCH_LEASE_CHANNEL"
_CHANNEL_ATTR = "_dynbranch_lease_channel"


def install(environ: dict[str, str] | None = None) -> bool:
    """Wrap ``AsyncLLM`` so that it opens the channel; False (nothing done) without an endpoint."""
    endpoint = (os.environ if environ is None else environ).get(ENV_CHANNEL, "")
    if not endpoint:
        return False
    try:
        check_endpoint(endpoint)
        from vllm.v1.engine.async_llm import AsyncLLM
    except Exception:  # a bad endpoint or a vLLM without AsyncLLM: the server runs without it
        logger.exception("dynbranch: the lease channel (%s=%s) will not open", ENV_CHANNEL,
                         endpoint)
        return False
    wrap_async_llm(AsyncLLM, endpoint)
    return True


def wrap_async_llm(cls: Any, endpoint: str) -> None:
    """Open the channel at the end of ``cls.__init__``, close it in ``cls.shutdown``; idempotent."""
    original_init, original_shutdown = cls.__init__, cls.shutdown
    if getattr(original_init, "_dynbranch", False):
        return

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        try:
            open_channel(self, endpoint)
        except Exception:  # never stop vLLM from starting
            logger.exception("dynbranch: the lease channel %s did not open", endpoint)

    def shutdown(self: Any, *args: Any, **kwargs: Any) -> Any:
        close_channel(self)
        return original_shutdown(self, *args, **kwargs)

    __init__._dynbranch = True  # type: ignore[attr-defined]
    cls.__init__, cls.shutdown = __init__, shutdown


def open_channel(llm: Any, endpoint: str) -> ChannelServer | None:
    """Serve ``llm.engine_core``'s dynbranch utilities at ``endpoint`` (None: not here)."""
    client = llm.engine_core
    if int(getattr(client, "client_index", 0) or 0) != 0:
        return None  # another API-server process serves it
    parallel = llm.vllm_config.parallel_config
    if int(getattr(parallel, "data_parallel_size", 1) or 1) > 1:
        logger.warning("dynbranch: no lease channel with data parallelism (leases are per engine "
                       "core); agents fall back to Cache-first")
        return None
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        logger.warning("dynbranch: AsyncLLM built outside an event loop; no lease channel")
        return None
    server = ChannelServer(endpoint, client.call_utility_async)
    server.start()
    setattr(llm, _CHANNEL_ATTR, server)
    logger.info("dynbranch: lease channel open at %s", endpoint)
    return server


def close_channel(llm: Any) -> None:
    """Close ``llm``'s channel if it has one (guarded: shutdown must go on)."""
    server = getattr(llm, _CHANNEL_ATTR, None)
    if server is None:
        return
    setattr(llm, _CHANNEL_ATTR, None)
    try:
        server.close()
    except Exception:
        logger.exception("dynbranch: closing the lease channel failed")


__all__ = ["ENV_CHANNEL", "close_channel", "install", "open_channel", "wrap_async_llm"]
