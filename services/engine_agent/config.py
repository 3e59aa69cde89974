"""Engine agent settings (env prefix ``DYNBRANCH_ENGINE_``)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator

from services.common.values.config import ServiceSettings
from services.engine_agent.leases.state import LEASE_MODE_SPECS, LeaseMode, LeaseSettings
from services.engine_agent.registry import BACKEND_NAMES
from services.engine_agent.sim.scheduler import QueuePolicy

#: The lease provider's defaults (LADS §5.1), the one copy the settings below take theirs from.
_LEASES = LeaseSettings()


class EngineAgentSettings(ServiceSettings):
    """Settings of one engine agent; backend-specific fields are ignored by other backends."""

    env_prefix: ClassVar[str] = "DYNBRANCH_ENGINE_"

    engine_id: str = Field("engine-0", min_length=1, max_length=128,
                           description="identity of the engine in the mesh")
    model: str = Field("qwen3-32b", min_length=1, description="model name callers must ask for")
    backend: str = Field("sim", description="engine backend: one of backends.registry.BACKENDS")
    # sim
    preset: str = Field("qwen3-32b-h200", description="sim cost-model preset name")
    preset_file: str = Field("", description="YAML/JSON file with a custom sim preset")
    time_scale: float = Field(1.0, ge=0, le=1000,
                              description="wall seconds per simulated second (0: no sleeping)")
    block_size: int = Field(0, ge=0, le=4096, description="tokens per KV block; 0: preset's")
    kv_blocks: int = Field(0, ge=0, description="KV blocks in the pool; 0: preset's")
    max_running: int = Field(0, ge=0, le=4096, description="max running sequences; 0: preset's")
    queue_policy: QueuePolicy = Field("fcfs", description=(
        "sim: waiting-queue order; fcfs (vLLM's) or program (Continuum's program-level FCFS, "
        "pinned programs first: the ttl_continuum and ttl_fixed baselines)"))
    kv_offload_gib: float = Field(0.0, ge=0, le=1 << 20, description=(
        "sim: host memory for KV offloading in GiB, like vLLM's --kv-offloading-size (evicted "
        "blocks reload over the preset's host link instead of being recomputed); 0: none"))
    # real engines
    model_path: str = Field("", description="vllm: local model folder")
    engine_url: str = Field("", description="openai/sglang: base URL of the server")
    kv_events_endpoint: str = Field("", description="openai: ZMQ endpoint of KV-cache events")
    lease_channel: str = Field("", description=(
        "openai: endpoint of the dynbranch vLLM plugin's lease channel (the server's "
        "DYNBRANCH_LEASE_CHANNEL, e.g. ipc:///run/vllm-kv/leases.ipc): prefix leases and exact "
        "allocation signals on a remote vLLM; none, or no answer at start: Cache-first"))
    fill_priority: int | None = Field(None, description=(
        "openai/sglang: request priority sent for fills (canonical requests send 0); none: "
        "no priority is sent. vLLM servers run fills later with 1 (--scheduling-policy "
        "priority), SGLang with -1 (--enable-priority-scheduling, higher values first)"))
    # LADS prefix leases (backends with a LeasePort: sim, embedded vllm, openai with a channel)
    lease_mode: LeaseMode = Field(_LEASES.mode, description="; ".join(
        f"{name}: {mode.summary}" for name, mode in LEASE_MODE_SPECS.items()))
    lease_lifetime_s: float = Field(_LEASES.lifetime_s, gt=0, le=3600,
                                    description="ℓ: cumulative lease lifetime from first grant")
    lease_headroom_blocks: int = Field(-1, ge=-1, description=(
        "H: blocks kept free; -1 scales the LADS paper's 2,048 of 12,315 blocks to this pool"))
    lease_interval_s: float = Field(_LEASES.interval_s, gt=0, le=10,
                                    description="budget evaluation period")
    lease_ttl_s: float = Field(_LEASES.ttl_s, gt=0, le=3600,
                               description="fixed_ttl: the TTL every pin gets")
    # limits and reporting
    max_prompt_bytes: int = Field(1024 * 1024, ge=1, description="largest prompt accepted")
    load_interval_s: float = Field(0.05, gt=0, le=60, description="default WatchLoad interval")

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        if value not in BACKEND_NAMES:
            raise ValueError(f"unknown backend {value!r}; known: {', '.join(BACKEND_NAMES)}")
        return value


__all__ = ["EngineAgentSettings"]
