"""Parsing engine ``/metrics`` pages into load views (vLLM 0.32 and SGLang names)."""

from __future__ import annotations

from services.engine_agent.backends.remote.engine_metrics import SGLANG, VLLM, parse_metrics

VLLM_PAGE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="a"} 3.0
vllm:num_requests_running{engine="1",model_name="a"} 1.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="a"} 2.0
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{engine="0",model_name="a",reason="capacity"} 2.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="a"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="a"} 0.25
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="a"} 1500.0
vllm:prefix_cache_queries_created{engine="0",model_name="a"} 1.7e9
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="a"} 1408.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",cache_dtype="auto",enable_prefix_caching="True",num_gpu_blocks="4096"} 1.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="a"} 77.0
"""


def test_vllm_page_sums_engines_and_reads_cache_info() -> None:
    snap = parse_metrics(VLLM_PAGE, VLLM)
    assert (snap.running, snap.waiting) == (4, 2)
    assert snap.kv_usage == 0.375  # averaged over engines
    assert (snap.prefix_query_tokens, snap.prefix_hit_tokens) == (1500, 1408)
    assert (snap.block_size, snap.num_blocks) == (128, 4096)
    load = snap.to_load(max_running=256, block_size=16, kv_blocks_total=1)
    assert load.kv_blocks_total == 4096 and load.kv_blocks_used == 1536
    assert load.block_size == 128


def test_sglang_page() -> None:
    page = ("sglang:num_running_reqs 2\nsglang:num_queue_reqs 5\nsglang:token_usage 0.1\n"
            "sglang:cache_hit_rate 0.6\n"
            'sglang:cache_config_info{page_size="1",num_pages="1000"} 1\n')
    snap = parse_metrics(page, SGLANG)
    assert (snap.running, snap.waiting, snap.hit_rate) == (2, 5, 0.6)
    assert (snap.block_size, snap.num_blocks) == (1, 1000)
    assert snap.to_load(48, 1, 1).kv_blocks_used == 100


def test_missing_series_read_as_zero() -> None:
    snap = parse_metrics("# nothing here\nother_metric 1\n", VLLM)
    assert (snap.running, snap.waiting, snap.kv_usage, snap.block_size) == (0, 0, 0.0, None)
