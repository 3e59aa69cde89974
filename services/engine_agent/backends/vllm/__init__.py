"""The ``vllm`` backend: vLLM's ``AsyncLLM`` embedded in the engine agent, vLLM unmodified.

* ``backend``: ``VllmBackend``, the ``EngineBackend`` over the embedded engine;
* ``leases``: prefix lookup, prefix leases and the first-allocation signal, through the plugin;
* ``lease_port``: the ``LeasePort`` over the plugin's lease utilities (also the ``openai``
  backend's, over the lease channel);
* ``chat``: chat templates, tool parsing and structured outputs;
* ``load``: the load view and the stat logger that feeds it;
* ``settings``: settings, environment and value mapping (no vLLM import; the remote backends,
  the calibration tool and the tests use it without the engine).

The engine side, the vLLM general plugin that runs inside vLLM's processes, is a distribution of
its own (``plugins/vllm``, ``dynbranch_vllm_plugin``): it imports nothing of dynbranch, so it
installs beside an unmodified vLLM. Nothing is imported here: ``vllm`` and ``torch`` stay lazy.
"""
