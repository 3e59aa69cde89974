"""The ``openai`` backend against a real ``vllm`` OpenAI server, with its metrics, its KV events
and the dynbranch plugin's lease channel.

One server for the module (``python -m vllm.entrypoints.openai.api_server``, about 35 s to
start), publishing KV-cache events on ``ipc://`` sockets with a replay endpoint, on a 24-block
pool, with the plugin's lease channel open (``DYNBRANCH_LEASE_CHANNEL``): the backend is a
``LeasePort`` over it and its ``Allocated`` events are the engine's own. The LADS cohort of
``lads_cohort`` runs on it last, as test_lads_cohort.py runs it on the embedded engine; a second
backend pointed at an endpoint nobody serves shows the fallback to Cache-first.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from loadgen.arms.lads_cohort import (
    HEADROOM_BLOCKS,
    NUM_BLOCKS,
    RecordingPort,
    Runs,
    check_handoffs,
    check_lads_run,
    check_leased_prefixes_hit,
    check_outputs_equal_fifo,
    cohort_workload,
    handed_off_lines,
)
from loadgen.arms.lads_replay import run_on
from services.common.values.generation import FinishReason, GenerationRequest, Sampling
from services.engine_agent.backend import Allocated, Finished, Queued, TokenDelta
from services.engine_agent.backends.openai import OpenAIBackend, RemoteSettings
from services.engine_agent.backends.remote.engine_metrics import parse_metrics
from services.engine_agent.backends.remote.kv_events import KVEventSubscriber
from services.engine_agent.config import EngineAgentSettings
from services.engine_agent.core import lease_provider
from services.engine_agent.leases.port import LeasePort
from tests.real_engine.engines import (
    MODEL_NAME,
    VllmServer,
    long_prompt,
    require_plugin,
    vllm_server,
)

pytestmark = [pytest.mark.real_engine, pytest.mark.slow,
              pytest.mark.asyncio(loop_scope="module")]

BLOCK = 128


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, run_dir: Path):
    require_plugin()
    folder = run_dir / "srv"
    folder.mkdir()
    with vllm_server(tiny_model_path, folder, blocks=NUM_BLOCKS, lease_channel=True) as srv:
        yield srv


def settings_of(server: VllmServer, **changes) -> RemoteSettings:
    return RemoteSettings(**{
        "base_url": server.url, "model": MODEL_NAME, "poll_interval_s": 0.2,
        "kv_events_endpoint": server.kv_endpoint,
        "kv_events_replay_endpoint": server.kv_replay_endpoint, "kv_events_topic": "kv-events",
        "lease_channel": server.lease_channel, **changes})


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def backend(server: VllmServer):
    b = OpenAIBackend(settings_of(server))
    await b.start()
    yield b
    await b.close()


def greedy(n: int) -> Sampling:
    return Sampling(max_tokens=n, temperature=0.0, ignore_eos=True)


async def run(b: OpenAIBackend, rid: str, prompt: str, n: int) -> list:
    return [ev async for ev in b.generate(GenerationRequest(rid, MODEL_NAME, prompt, greedy(n)))]


async def raw_metrics(server: VllmServer) -> dict[str, float]:
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"{server.url}/metrics")).text
    from prometheus_client.parser import text_string_to_metric_families
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


async def wait_until(cond, timeout: float = 5.0, step: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not await cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(step)


async def test_server_facts_and_leases_over_the_channel(backend: OpenAIBackend,
                                                        server: VllmServer) -> None:
    info = backend.info
    assert info.max_model_len == 2048 and info.block_size == BLOCK
    assert info.kv_blocks_total == server.num_blocks
    assert info.leases_supported and isinstance(backend, LeasePort)
    assert info.extra["allocated_signal"] == "exact (lease channel)"
    assert backend.lease_block_size == BLOCK
    settings = EngineAgentSettings(backend="openai", engine_url=server.url,
                                   lease_channel=server.lease_channel)
    assert lease_provider(settings, backend) is not None  # the agent runs LADS on it
    state = await backend.pool_state()
    assert state.total_blocks == server.num_blocks - 1 and state.max_running > 0


async def test_streaming_greedy_and_deterministic(backend: OpenAIBackend) -> None:
    prompt = long_prompt(11, 300)
    first = await run(backend, "oa-1", prompt, 16)
    assert isinstance(first[0], Queued) and isinstance(first[1], Allocated)
    deltas = [e for e in first if isinstance(e, TokenDelta)]
    assert len(deltas) >= 2 and sum(d.tokens for d in deltas) == 16
    fin = first[-1]
    assert isinstance(fin, Finished) and fin.reason == FinishReason.LENGTH
    assert fin.usage.completion_tokens == 16 and fin.usage.prompt_tokens == first[0].prompt_tokens
    again = await run(backend, "oa-2", prompt, 16)
    assert again[-1].text == fin.text


async def test_abort_by_closing_the_stream_frees_the_slot(backend: OpenAIBackend,
                                                          server: VllmServer) -> None:
    # On two busy cores the test can be starved while the tiny model writes all 1500 tokens
    # (seen: the request had succeeded by the first scrape). Such a request shows no abort,
    # so a fresh one is tried, up to three times.
    async def running() -> bool:  # the server's gauges follow its steps, not our reads
        return (await backend.refresh_load()).running == 1

    for attempt in range(3):
        rid = f"oa-abort-{attempt}"
        gen = backend.generate(GenerationRequest(rid, MODEL_NAME, long_prompt(12, 300),
                                                 greedy(1500)))
        seen = 0
        async for ev in gen:
            seen += isinstance(ev, TokenDelta)
            if seen == 3:
                break
        try:
            await wait_until(running, timeout=10.0)
            break
        except AssertionError:
            rest = [ev async for ev in gen]  # not seen running: only a finished one is retried
            if not (rest and isinstance(rest[-1], Finished)
                    and rest[-1].reason == FinishReason.LENGTH):
                raise
    else:
        pytest.fail("each of 3 requests finished before it was seen running")
    assert await backend.abort(rid) is True
    tail = [ev async for ev in gen]
    assert isinstance(tail[-1], Finished) and tail[-1].reason == FinishReason.ABORT

    async def idle() -> bool:
        return (await backend.refresh_load()).running == 0
    await wait_until(idle, timeout=10.0)  # generous: CI shares 2 cores with the engine
    produced = (await raw_metrics(server))["vllm:generation_tokens_total"]
    await asyncio.sleep(0.5)
    assert (await raw_metrics(server))["vllm:generation_tokens_total"] == produced  # stopped


async def test_prefix_cache_hits_in_usage_metrics_and_kv_events(backend: OpenAIBackend,
                                                                server: VllmServer) -> None:
    prompt = long_prompt(13, 1500)
    before = await backend.refresh_load()
    first = (await run(backend, "oa-hit-1", prompt, 2))[-1]
    n = first.usage.prompt_tokens
    expected = (n - 1) // BLOCK * BLOCK
    assert first.usage.cached_prompt_tokens == 0

    # the KV events of that prompt reach the residency map
    assert backend.subscriber is not None

    async def resident() -> bool:
        return (await backend.lookup_prefix(prompt)).resident_tokens == expected
    await wait_until(resident, timeout=3.0)
    assert backend.subscriber.stats.events > 0 and backend.subscriber.stats.decode_errors == 0

    second = await run(backend, "oa-hit-2", prompt, 2)
    assert second[-1].usage.cached_prompt_tokens == expected
    assert next(e for e in second if isinstance(e, Allocated)).cached_prompt_tokens == expected
    after = await backend.refresh_load()
    assert after.prefix_hit_tokens - before.prefix_hit_tokens == expected
    assert after.prefix_query_tokens - before.prefix_query_tokens == 2 * n


async def test_late_subscriber_catches_up_through_replay(backend: OpenAIBackend,
                                                        server: VllmServer) -> None:
    prompt = long_prompt(14, 700)
    await run(backend, "oa-replay", prompt, 1)
    ids = await backend.tokenize(prompt)
    late = KVEventSubscriber(server.kv_endpoint, server.kv_replay_endpoint, topic="kv-events")
    await late.start()  # joins after the events were published
    try:
        assert late.stats.replayed > 0
        assert late.residency.resident_tokens(ids) == len(ids) // BLOCK * BLOCK
    finally:
        await late.close()


async def test_metrics_page_parses_with_vllm_names(server: VllmServer) -> None:
    async with httpx.AsyncClient() as client:
        page = (await client.get(f"{server.url}/metrics")).text
    snap = parse_metrics(page)
    assert snap.block_size == BLOCK and snap.num_blocks == server.num_blocks
    assert 0.0 <= snap.kv_usage <= 1.0


async def test_the_lease_channel_round_trip(backend: OpenAIBackend) -> None:
    times = []
    for _ in range(50):
        started = time.perf_counter()
        await backend.pool_state()
        times.append(time.perf_counter() - started)
    print(f"\nlease channel round trip (pool_state, idle server): median "
          f"{statistics.median(times) * 1e3:.2f} ms, max {max(times) * 1e3:.2f} ms")
    assert statistics.median(times) < 0.5


async def test_a_server_without_the_channel_falls_back_to_cache_first(
        server: VllmServer, caplog: pytest.LogCaptureFixture) -> None:
    # What an agent sees of a server without the plugin, or without DYNBRANCH_LEASE_CHANNEL:
    # nobody answers at the endpoint. One WARNING, no error, and it serves.
    nobody = server.lease_channel.replace("leases.ipc", "nobody.ipc")
    b = OpenAIBackend(settings_of(server, lease_channel=nobody, lease_handshake_s=0.5))
    with caplog.at_level(logging.INFO):
        await b.start()
    try:
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert [r.levelno for r in warnings] == [logging.WARNING]
        assert nobody in warnings[0].getMessage()
        assert "delivery falls back to Cache-first" in warnings[0].getMessage()
        assert not b.info.leases_supported
        settings = EngineAgentSettings(backend="openai", engine_url=server.url,
                                       lease_channel=nobody)
        assert lease_provider(settings, b) is None
        events = await run(b, "oa-no-channel", long_prompt(15, 200), 2)
        assert isinstance(events[1], Allocated) and isinstance(events[-1], Finished)
    finally:
        await b.close()


# ---- the LADS cohort over the lease channel (last: it fills the pool) ------------------------


@pytest.fixture(scope="module")
def local_tokenize(tiny_model_path: Path):
    """The server's tokenizer file, synchronous: ``run_on`` sizes its frames with one (the
    provider it builds uses the same; the test below checks it matches ``/tokenize``)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tiny_model_path / "tokenizer.json"))
    return lambda text: list(tokenizer.encode(text, add_special_tokens=True).ids)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def runs(backend: OpenAIBackend, local_tokenize) -> Runs:
    workload, every_block = cohort_workload(), list(range(NUM_BLOCKS))
    port = RecordingPort(backend, local_tokenize)
    refs_before = await backend.block_refs(every_block)
    started = time.monotonic()
    lads = await run_on(port, workload, "lads", headroom_blocks=HEADROOM_BLOCKS,
                        clock=time.monotonic)
    lads_s = time.monotonic() - started
    refs_after = await backend.block_refs(every_block)
    lease_refs_after = await backend.lease_refs()
    started = time.monotonic()
    fifo = await run_on(RecordingPort(backend, local_tokenize), workload, "fifo",
                        headroom_blocks=HEADROOM_BLOCKS, clock=time.monotonic)
    return Runs(lads, fifo, port, refs_before, refs_after, lease_refs_after, lads_s,
                time.monotonic() - started)


async def test_cohort_tokens_are_the_servers(backend: OpenAIBackend, local_tokenize) -> None:
    for wf in cohort_workload().workflows:
        text = wf.history_text + wf.calls[1].observation
        assert local_tokenize(text) == await backend.tokenize(text)


async def test_cohort_lads_run_releases_every_reference_on_the_server(runs: Runs) -> None:
    print(f"\nlads over the channel: {runs.lads_s:.1f} s (fifo {runs.fifo_s:.1f} s), "
          f"{runs.lads.stats}\nrefs before {runs.refs_before}\nrefs after  {runs.refs_after}")
    check_lads_run(runs)


async def test_cohort_leases_are_handed_off_to_their_continuations(runs: Runs) -> None:
    check_handoffs(runs)


async def test_cohort_handed_off_continuations_hit_their_leased_prefix(runs: Runs) -> None:
    print("\n" + "\n".join(handed_off_lines(runs)))
    check_leased_prefixes_hit(runs)


async def test_cohort_outputs_equal_those_of_the_fifo_run(runs: Runs) -> None:
    check_outputs_equal_fifo(runs)
