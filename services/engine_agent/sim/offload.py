"""A CPU tier for evicted KV blocks, after vLLM's native KV offloading.

vLLM ships CPU KV offloading (``--kv-offloading-backend native --kv-offloading-size GiB``: the
``OffloadingConnector`` of ``vllm/distributed/kv_transfer/kv_connector/v1/offloading/`` over the
CPU manager of ``vllm/v1/kv_offload/cpu/``, LRU by default). The sim models what it does to
latency, not how it moves bytes:

* **store**: every full block the engine computes is copied to host memory as it is cached
  (write-through; the device-to-host copies overlap compute, so they cost no step time here);
  the tier keeps at most ``capacity_blocks`` blocks and drops the least recently used;
* **load**: a waiting request whose prefix continues past its GPU-resident blocks into the tier
  gets GPU blocks for those tokens and waits while they are copied in, without taking a running
  slot or step time, like vLLM's ``WAITING_FOR_REMOTE_KVS``; loads queue on one host-to-device
  link at ``bytes_per_s`` (the preset's host link: PCIe, per direction, from the datasheet, times
  an assumed copy efficiency); the request is then scheduled with those tokens computed.

Protocol-free and clock-free: the caller passes the time (the engine's wall clock) and its time
scale.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from services.engine_agent.sim.step_cost import CostPreset

GiB = 1 << 30
#: Share of the host link's per-direction datasheet rate a pinned-memory copy reaches (ours,
#: an assumption: cudaMemcpyAsync from pinned host memory typically reaches 75-85% of PCIe).
HOST_COPY_EFFICIENCY = 0.8


@dataclass(frozen=True, slots=True)
class OffloadSpec:
    """Size and speed of a CPU tier: blocks it holds, bytes a block takes, copy rate."""

    capacity_blocks: int
    block_bytes: float
    bytes_per_s: float

    def __post_init__(self) -> None:
        if self.capacity_blocks < 1:
            raise ValueError(f"offload capacity must be >= 1 block, got {self.capacity_blocks}")
        if not self.block_bytes > 0 or not self.bytes_per_s > 0:
            raise ValueError("offload block_bytes and bytes_per_s must be > 0")

    @classmethod
    def from_preset(cls, preset: CostPreset, gib: float) -> OffloadSpec:
        """The tier ``--kv-offloading-size gib`` gives ``preset``'s model on its host link."""
        rate = preset.gpu.host_link_bytes_per_s
        if not rate:
            raise ValueError(f"preset {preset.name!r} has no host link rate "
                             "(gpu.host_link_bytes_per_s): KV offloading cannot be modelled")
        block_bytes = preset.model.kv_bytes_per_token * preset.block_size
        return cls(int(gib * GiB // block_bytes), block_bytes, rate * HOST_COPY_EFFICIENCY)

    def load_s(self, blocks: int) -> float:
        """Seconds to copy ``blocks`` blocks to the device."""
        return blocks * self.block_bytes / self.bytes_per_s


@dataclass(slots=True)
class OffloadStats:
    """Blocks stored, dropped from the tier, loaded back, and the seconds loads took."""

    stored: int = 0
    dropped: int = 0
    loads: int = 0
    loaded_blocks: int = 0
    load_s: float = 0.0


class HostTier:
    """The CPU tier's contents (block hashes, LRU) and its host-to-device link."""

    def __init__(self, spec: OffloadSpec) -> None:
        self.spec = spec
        self._blocks: OrderedDict[int, None] = OrderedDict()
        self._link_free_at = 0.0
        self.stats = OffloadStats()

    def __len__(self) -> int:
        return len(self._blocks)

    def store(self, block_hash: int) -> None:
        """Copy a just-computed block out (or refresh it); drop the LRU block beyond capacity."""
        blocks = self._blocks
        if block_hash in blocks:
            blocks.move_to_end(block_hash)
            return
        blocks[block_hash] = None
        self.stats.stored += 1
        if len(blocks) > self.spec.capacity_blocks:
            blocks.popitem(last=False)
            self.stats.dropped += 1

    def hits(self, block_hashes: Sequence[int], start: int, limit: int) -> int:
        """How many blocks from ``start`` (below ``limit``) the tier holds in a row; refreshes
        them (a lookup that will load is a use)."""
        n = 0
        blocks = self._blocks
        for block_hash in block_hashes[start:limit]:
            if block_hash not in blocks:
                break
            blocks.move_to_end(block_hash)
            n += 1
        return n

    def schedule_load(self, now: float, blocks: int, time_scale: float) -> float:
        """Queue a load of ``blocks`` on the link at ``now``; when it completes (same clock).

        ``time_scale`` turns the copy's seconds into the caller's clock (0: instant)."""
        seconds = self.spec.load_s(blocks)
        start = max(now, self._link_free_at)
        done = start + seconds * time_scale
        self._link_free_at = done
        self.stats.loads += 1
        self.stats.loaded_blocks += blocks
        self.stats.load_s += seconds
        return done


__all__ = ["HOST_COPY_EFFICIENCY", "HostTier", "OffloadSpec", "OffloadStats"]
