"""Engine agent: one per engine; one backend (sim, vllm, openai, sglang) behind one interface.

Rooms: ``sim/`` (the simulated engine, shaped like vLLM's ``v1/core/``), ``leases/`` (the LADS
lease provider), ``backends/`` (the backends, with ``remote/`` for the HTTP ones), the port a
backend implements (``backend``), the table of backends (``registry``), the composition root
(``core.EngineAgent``: a backend, its lease provider and receipts), and the transport at
the top: ``servicer``, ``mux_servicer``, ``mux_client``, ``client``, ``server``, and
``calibrate`` (a command that drives a real engine). The face below is the in-process API
(``services.common.values.face``); it imports nothing until a name is used, since the vLLM
plugin loads this package in vLLM's own processes.
"""

from services.common.values.face import lazy_face

__all__, __getattr__ = lazy_face(__name__, {
    "Allocated": "backend", "BACKENDS": "registry", "BACKEND_NAMES": "registry",
    "CostPreset": "sim.step_cost", "EngineAgent": "core", "EngineAgentClient": "client",
    "EngineAgentSettings": "config",
    "EngineBackend": "backend", "Finished": "backend", "LeaseProvider": "leases.provider",
    "LeaseSettings": "leases.provider", "MESH_BACKENDS": "registry", "SERVER_BACKENDS": "registry",
    "SimBackend": "backends.sim", "TokenDelta": "backend", "build_runtime": "server",
    "get_preset": "sim.cost_model", "load_preset_file": "sim.cost_model",
    "make_backend": "backends.factory", "scaled_headroom": "leases.budget",
    "tiny_model_path": "registry",
})
