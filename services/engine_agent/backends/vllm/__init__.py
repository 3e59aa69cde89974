"""The ``vllm`` backend: vLLM's ``AsyncLLM`` embedded in the engine agent, vLLM unmodified.

* ``backend``: ``VllmBackend``, the ``EngineBackend`` over the embedded engine;
* ``leases``: prefix lookup, prefix leases and the first-allocation signal, through the plugin;
* ``plugin``: the vLLM general plugin, run inside vLLM's engine-core process;
* ``load``: the load view and the stat logger that feeds it;
* ``settings``: settings, environment and value mapping (no vLLM import; the remote backends,
  the calibration tool and the tests use it without the engine).

Nothing is imported here: ``vllm`` and ``torch`` stay lazy, and vLLM imports ``plugin`` (through
this package) in each of its processes.
"""
