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

from typing import TYPE_CHECKING

from services.common.values.face import lazy_face

if TYPE_CHECKING:  # the table's names, typed, for mypy and IDEs (tests/test_types.py)
    from services.engine_agent.backend import Allocated as Allocated
    from services.engine_agent.backend import EngineBackend as EngineBackend
    from services.engine_agent.backend import Finished as Finished
    from services.engine_agent.backend import TokenDelta as TokenDelta
    from services.engine_agent.backends.factory import make_backend as make_backend
    from services.engine_agent.backends.remote.backend import RemoteSettings as RemoteSettings
    from services.engine_agent.backends.servers import EngineServer as EngineServer
    from services.engine_agent.backends.servers import SglangOptions as SglangOptions
    from services.engine_agent.backends.servers import sglang_python as sglang_python
    from services.engine_agent.backends.servers import sglang_server as sglang_server
    from services.engine_agent.backends.sglang import SglangBackend as SglangBackend
    from services.engine_agent.backends.sim import SimBackend as SimBackend
    from services.engine_agent.backends.vllm.backend import VllmBackend as VllmBackend
    from services.engine_agent.backends.vllm.settings import VllmSettings as VllmSettings
    from services.engine_agent.calibrate import Grid as Grid
    from services.engine_agent.calibrate import TokenText as TokenText
    from services.engine_agent.calibrate import calibrate_backend as calibrate_backend
    from services.engine_agent.calibrate import engine_limits as engine_limits
    from services.engine_agent.calibrate import fit_tiny as fit_tiny
    from services.engine_agent.calibrate import tiny_engine_settings as tiny_engine_settings
    from services.engine_agent.client import EngineAgentClient as EngineAgentClient
    from services.engine_agent.config import EngineAgentSettings as EngineAgentSettings
    from services.engine_agent.core import EngineAgent as EngineAgent
    from services.engine_agent.leases.budget import scaled_headroom as scaled_headroom
    from services.engine_agent.leases.provider import LeaseProvider as LeaseProvider
    from services.engine_agent.leases.provider import LeaseSettings as LeaseSettings
    from services.engine_agent.registry import BACKEND_NAMES as BACKEND_NAMES
    from services.engine_agent.registry import BACKENDS as BACKENDS
    from services.engine_agent.registry import MESH_BACKENDS as MESH_BACKENDS
    from services.engine_agent.registry import SERVER_BACKENDS as SERVER_BACKENDS
    from services.engine_agent.registry import resolve as resolve
    from services.engine_agent.registry import spec as spec
    from services.engine_agent.registry import tiny_model_path as tiny_model_path
    from services.engine_agent.running import RunningFills as RunningFills
    from services.engine_agent.server import build_runtime as build_runtime
    from services.engine_agent.sim.calibrate_fit import predicted as predicted
    from services.engine_agent.sim.calibrate_fit import rel_errors as rel_errors
    from services.engine_agent.sim.cost_model import get_preset as get_preset
    from services.engine_agent.sim.cost_model import load_preset_file as load_preset_file
    from services.engine_agent.sim.step_cost import CostPreset as CostPreset
    from services.engine_agent.sim.tokenizer import pieces as pieces
    from services.engine_agent.sim.tokenizer import text_key as text_key
else:  # at run time: each name imported from its module when first used
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
