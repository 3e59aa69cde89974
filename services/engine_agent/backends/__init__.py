"""The engine backends behind ``EngineBackend``, and the one table that names them.

Layout:

* ``factory``: ``make_backend``, the one place that builds one by its name in
  ``services.engine_agent.registry.BACKENDS`` (importing its module only then);
* ``sim``: ``SimBackend``, over the simulated engine (``services.engine_agent.sim``) that tests
  and the demo use;
* ``vllm/``: vLLM's ``AsyncLLM`` embedded in this process (``backend``), its prefix leases
  (``leases``; ``lease_port``, the ``LeasePort`` over the plugin's utilities), load view
  (``load``) and settings (``settings``); the engine-core plugin they call is its own
  distribution, ``plugins/vllm``;
* ``remote/``: what the HTTP backends share (``backend``: client, request bookkeeping, the
  stream-consuming loop; ``engine_metrics``: the ``/metrics`` load view; ``kv_events``: KV-event
  residency; ``lease_channel`` and ``leases``: the plugin's lease utilities over its lease
  channel); ``openai`` and ``sglang`` speak one request format each over it;
* ``http``: the HTTP helpers they use (error mapping, server-sent events, token estimate);
* ``servers``: launching a vLLM or SGLang server beside an agent; ``tiny_model``: the
  random-weight model real-engine tests load.

What a backend may import: ``services.common.*``, the engine agent's ports (``backend``,
``leases.port``) and the simulated engine's pieces, and modules of its own backend; the remote
backends also use ``vllm.settings`` (sampling checks, finish reasons), which imports no vLLM. No
core module, servicer or server imports a backend module: only ``factory.make_backend`` does,
lazily, so that importing the engine agent pulls in neither vLLM nor SGLang
(``tests/test_layering.py``).

This package imports nothing heavy.
"""

from services.engine_agent.backends.factory import make_backend
from services.engine_agent.registry import BACKEND_NAMES, BACKENDS

__all__ = ["BACKENDS", "BACKEND_NAMES", "make_backend"]
