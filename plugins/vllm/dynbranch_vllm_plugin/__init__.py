"""The dynbranch vLLM plugin: prefix residency, prefix leases and exact first-allocation signals
for an unmodified vLLM (>= 0.32, v1 engine), and the local lease channel that serves them to an
agent outside vLLM's processes.

vLLM loads it through the ``vllm.general_plugins`` entry point ``dynbranch`` (this
distribution's ``pyproject.toml``) in every one of its processes, and calls ``register()``:

* ``engine_core``: the ``dynbranch_*`` utility methods added to ``EngineCore`` and the guarded
  schedule hook (handoffs, allocation signals, κ); ``leases``: the lease mechanism;
  ``request_ids``: which engine request ids are a client's own id;
* ``channel``: the lease channel's server (ZMQ ROUTER); ``frontend``: opens it in the API
  server when ``DYNBRANCH_LEASE_CHANNEL`` names an endpoint;
* ``values``: the two values shared with dynbranch, copied (this package imports no dynbranch).

Importing the package is cheap: vLLM is imported only inside ``register()``.
"""

from __future__ import annotations

import logging


def register() -> None:
    """Entry point of ``vllm.general_plugins``: the engine-core utilities, and the lease channel
    where ``DYNBRANCH_LEASE_CHANNEL`` is set. Safe to call more than once, in any process."""
    from dynbranch_vllm_plugin import engine_core, frontend

    log_with_vllm()
    engine_core.register_engine_core()
    frontend.install()


def log_with_vllm() -> None:
    """Send the plugin's log lines where vLLM sends its own (vLLM configures only the ``vllm``
    logger; without this an operator would not see that the lease channel opened)."""
    ours, theirs = logging.getLogger(__name__), logging.getLogger("vllm")
    if ours.handlers or not theirs.handlers:
        return
    for handler in theirs.handlers:
        ours.addHandler(handler)
    ours.setLevel(theirs.level or logging.INFO)
    ours.propagate = False


__all__ = ["log_with_vllm", "register"]
