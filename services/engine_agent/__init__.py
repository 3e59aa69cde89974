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
    "EngineAgentSettings": "config", "EngineBackend": "backend",
    "EngineServer": "backends.servers", "Finished": "backend", "Grid": "calibrate",
    "LeaseProvider": "leases.provider", "LeaseSettings": "leases.provider",
    "MESH_BACKENDS": "registry", "RemoteSettings": "backends.remote.backend",
    "SERVER_BACKENDS": "registry", "SglangBackend": "backends.sglang",
    "SglangOptions": "backends.servers", "SimBackend": "backends.sim", "TokenDelta": "backend",
    "TokenText": "calibrate", "VllmBackend": "backends.vllm.backend",
    "VllmSettings": "backends.vllm.settings", "build_runtime": "server",
    "calibrate_backend": "calibrate", "engine_limits": "calibrate", "fit_tiny": "calibrate",
    "get_preset": "sim.cost_model", "load_preset_file": "sim.cost_model",
    "make_backend": "backends.factory", "pieces": "sim.tokenizer",
    "predicted": "sim.calibrate_fit", "rel_errors": "sim.calibrate_fit", "resolve": "registry",
    "RunningFills": "running",
    "scaled_headroom": "leases.budget", "sglang_python": "backends.servers",
    "sglang_server": "backends.servers", "spec": "registry", "text_key": "sim.tokenizer",
    "tiny_engine_settings": "calibrate", "tiny_model_path": "registry",
})
