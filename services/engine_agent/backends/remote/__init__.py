"""What the remote HTTP backends (``openai``, ``sglang``) share: the backend over an HTTP engine
(``backend``), the engine's Prometheus ``/metrics`` read as a load view (``engine_metrics``) and
its KV-cache events read as a residency map (``kv_events``)."""

from services.engine_agent.backends.remote.backend import (
           RemoteBackend,
           RemoteSettings,
           RemoteStream,
)
from services.engine_agent.backends.remote.engine_metrics import EngineSnapshot, parse_metrics
from services.engine_agent.backends.remote.kv_events import KVEventSubscriber

__all__ = ["EngineSnapshot", "KVEventSubscriber", "RemoteBackend", "RemoteSettings", "RemoteStream",
           "parse_metrics"]
