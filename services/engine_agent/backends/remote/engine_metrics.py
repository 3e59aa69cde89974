"""Load views from an engine's own Prometheus ``/metrics`` (vLLM and SGLang names).

The remote backends poll ``/metrics`` and read a few series by name; everything else on the page
is ignored. Several series of one name (one per model or engine label set) are summed, except
the usage fraction, which is averaged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from services.common.values.generation import LoadReport


@dataclass(frozen=True, slots=True)
class MetricNames:
    """Which series of an engine's metrics page carry the load."""

    running: str
    waiting: str
    usage: str
    prefix_queries: str = ""
    prefix_hits: str = ""
    hit_rate: str = ""
    cache_info: str = ""
    block_size_label: str = "block_size"
    num_blocks_label: str = "num_gpu_blocks"


VLLM = MetricNames(
    running="vllm:num_requests_running",
    waiting="vllm:num_requests_waiting",
    usage="vllm:kv_cache_usage_perc",
    prefix_queries="vllm:prefix_cache_queries_total",
    prefix_hits="vllm:prefix_cache_hits_total",
    cache_info="vllm:cache_config_info",
)
SGLANG = MetricNames(
    running="sglang:num_running_reqs",
    waiting="sglang:num_queue_reqs",
    usage="sglang:token_usage",
    hit_rate="sglang:cache_hit_rate",
    cache_info="sglang:cache_config_info",
    block_size_label="page_size",
    num_blocks_label="num_pages",
)
FLAVORS = {"vllm": VLLM, "sglang": SGLANG}


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """One scrape of an engine's metrics."""

    running: int
    waiting: int
    kv_usage: float
    prefix_query_tokens: int = 0
    prefix_hit_tokens: int = 0
    hit_rate: float | None = None
    block_size: int | None = None
    num_blocks: int | None = None
    scraped_at: float = 0.0

    def to_load(self, max_running: int, block_size: int, kv_blocks_total: int) -> LoadReport:
        """The snapshot as a ``LoadReport`` (fallbacks for facts the page does not carry)."""
        total = self.num_blocks or kv_blocks_total
        return LoadReport(
            running=self.running, waiting=self.waiting, max_running=max_running,
            kv_blocks_used=round(self.kv_usage * total), kv_blocks_total=total,
            block_size=self.block_size or block_size,
            prefix_query_tokens=self.prefix_query_tokens,
            prefix_hit_tokens=self.prefix_hit_tokens,
        )


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name → (labels, value) for every sample on the page."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return out


def _sum(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    return sum(v for _, v in samples.get(name, ()))


def _mean(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float | None:
    values = [v for _, v in samples.get(name, ())]
    return sum(values) / len(values) if values else None


def _info_int(samples: dict[str, list[tuple[dict[str, str], float]]], name: str,
              label: str) -> int | None:
    for labels, _ in samples.get(name, ()):
        raw = labels.get(label, "")
        if raw.isdigit():
            return int(raw)
    return None


def parse_metrics(text: str, names: MetricNames = VLLM) -> EngineSnapshot:
    """Parse a Prometheus exposition page into an ``EngineSnapshot``."""
    samples = _samples(text)
    return EngineSnapshot(
        running=round(_sum(samples, names.running)),
        waiting=round(_sum(samples, names.waiting)),
        kv_usage=_mean(samples, names.usage) or 0.0,
        prefix_query_tokens=round(_sum(samples, names.prefix_queries)),
        prefix_hit_tokens=round(_sum(samples, names.prefix_hits)),
        hit_rate=_mean(samples, names.hit_rate) if names.hit_rate else None,
        block_size=_info_int(samples, names.cache_info, names.block_size_label),
        num_blocks=_info_int(samples, names.cache_info, names.num_blocks_label),
        scraped_at=time.time(),
    )


__all__ = ["FLAVORS", "SGLANG", "VLLM", "EngineSnapshot", "MetricNames", "parse_metrics"]
