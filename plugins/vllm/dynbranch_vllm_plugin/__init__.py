"""The dynbranch vLLM plugin: prefix residency, prefix leases and exact first-allocation signals
for an unmodified vLLM (>= 0.32, v1 engine), and the local lease channel that serves them to an
agent outside vLLM's processes.

vLLM loads it through the ``vllm.general_plugins`` entry point ``dynbranch`` (this
distribution's ``pyproject.toml``) in every one of its processes, and calls ``register()``:

* ``engine_core``: the ``dynbranch_*`` utility methods added to ``EngineCore`` and the guarded
  schedule hook (handoffs, allocation signals, κ); ``leases``: the lease mechanism;
  ``priority``: moving a live request between priorities (an adopted fill raised);
  ``request_ids``: which engine request ids are a client's own id;
* ``channel``: the lease channel's server (ZMQ ROUTER); ``frontend``: opens it in the API
  server when ``DYNBRANCH_LEASE_CHANNEL`` names an endpoint;
* ``values``: the two values shared with dynbranch, copied (this package imports no dynbranch).

Importing the package is cheap: vLLM is imported only inside ``register()``. Its loggers are
named ``vllm.dynbranch_vllm_plugin.*``: vLLM configures its ``vllm`` logger (handlers, no
propagation) and nothing else, so only there do the plugin's lines reach vLLM's log.
"""

from __future__ import annotations


def register() -> None:
    """Entry point of ``vllm.general_plugins``: the engine-core utilities, and the lease channel
    where ``DYNBRANCH_LEASE_CHANNEL`` is set. Safe to call more than once, in any process."""
    from dynbranch_vllm_plugin import engine_core, frontend

    engine_core.register_engine_core()
    frontend.install()


__all__ = ["register"]
