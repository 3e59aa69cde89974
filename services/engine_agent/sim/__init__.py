"""The simulated engine, shaped like vLLM's ``v1/core/``: the block pool (``block_pool``), the
KV cache manager over it (``kv_cache``), sequences (``sequence``), the scheduler
(``scheduler``), the engine and its step loop (``engine``), the cost model and its presets
(``cost_model``, ``step_cost``, ``presets/``), the tokenizer (``tokenizer``), simulated tool calls
(``tools``) and the engine's lease port (``leases``). ``calibrate_fit`` fits a preset to timings a
real engine gave (``services.engine_agent.calibrate`` measures them). Protocol-free: nothing
here imports gRPC, HTTP or the generated stubs."""

from services.engine_agent.sim.block_pool import BlockPool, KVBlock, hash_full_blocks
from services.engine_agent.sim.cost_model import get_preset, load_preset_file
from services.engine_agent.sim.engine import SimEngine
from services.engine_agent.sim.kv_cache import KVCacheManager
from services.engine_agent.sim.scheduler import Scheduler, StepPlan
from services.engine_agent.sim.sequence import SeqState, Sequence
from services.engine_agent.sim.step_cost import (
           CostPreset,
           GpuSpec,
           MeasuredCost,
           ModelSpec,
           StepWork,
)

__all__ = ["BlockPool", "CostPreset", "GpuSpec", "KVBlock", "KVCacheManager", "MeasuredCost",
           "ModelSpec", "Scheduler", "SeqState", "Sequence", "SimEngine", "StepPlan", "StepWork",
           "get_preset", "hash_full_blocks", "load_preset_file"]
