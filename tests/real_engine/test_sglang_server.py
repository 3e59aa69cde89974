"""The ``sglang`` backend against a live SGLang 0.5.23 on the tiny random-weight model.

One server for the module (started and stopped by a fixture, about 20 s): CPU torch path,
``--max-running-requests 4`` so that a fifth request queues, priority scheduling on (fills send
priority -1, canonical work 0; SGLang runs larger values first). The crash test starts a server
of its own and kills it. Installed by ``scripts/install_sglang.sh``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from services.common.values.errors import Unavailable
from services.common.values.generation import FinishReason, GenerationRequest, Priority, Sampling
from services.engine_agent.backend import Allocated, Finished, Queued, TokenDelta
from services.engine_agent.backends.remote.backend import RemoteSettings
from services.engine_agent.backends.remote.engine_metrics import SGLANG
from services.engine_agent.backends.servers import (
    EngineServer,
    SglangOptions,
    sglang_server,
    tiny_model_for_sglang,
)
from services.engine_agent.backends.sglang import SglangBackend, totals_only
from tests.real_engine.engines import MODEL_NAME, long_prompt, require_sglang

pytestmark = [pytest.mark.real_engine, pytest.mark.slow,
              pytest.mark.asyncio(loop_scope="module")]

SLOTS = 4
FILL_PRIORITY = -1


@pytest.fixture(scope="module")
def sglang_model() -> Path:
    require_sglang()
    return tiny_model_for_sglang()


async def _started(model: Path, folder: Path, name: str) -> EngineServer:
    server = sglang_server(SglangOptions(model_path=str(model), served_name=MODEL_NAME,
                                         max_running=SLOTS), folder, name)
    await server.start()
    return server


def _backend(server: EngineServer) -> SglangBackend:
    return SglangBackend(RemoteSettings(base_url=server.url, model=MODEL_NAME, flavor="sglang",
                                        fill_priority=FILL_PRIORITY, poll_interval_s=0.2,
                                        request_timeout_s=120.0))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(sglang_model: Path, run_dir: Path) -> AsyncIterator[EngineServer]:
    srv = await _started(sglang_model, run_dir / "sglang", "sglang")
    yield srv
    await srv.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def backend(server: EngineServer) -> AsyncIterator[SglangBackend]:
    b = _backend(server)
    await b.start()
    yield b
    await b.close()


def greedy(max_tokens: int) -> Sampling:
    return Sampling(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)


def request(rid: str, prompt: str, max_tokens: int,
            priority: Priority = Priority.CANONICAL) -> GenerationRequest:
    return GenerationRequest(rid, MODEL_NAME, prompt, greedy(max_tokens), priority)


async def run(b: SglangBackend, rid: str, prompt: str, max_tokens: int) -> list:
    return [ev async for ev in b.generate(request(rid, prompt, max_tokens))]


async def metrics(server: EngineServer) -> dict[str, float]:
    """Each series of the server's metrics page, its total summed over labels."""
    async with httpx.AsyncClient(timeout=5.0) as client:
        page = totals_only((await client.get(f"{server.url}/metrics")).text)
    out: dict[str, float] = {}
    for line in page.splitlines():
        if line and not line.startswith("#"):
            name, value = line.split("{")[0].split(" ")[0], float(line.rsplit(" ", 1)[1])
            out[name] = out.get(name, 0.0) + value
    return out


async def wait_until(cond, timeout: float = 15.0, step: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not await cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(step)


async def running(b: SglangBackend, n: int) -> None:
    """Wait until the metrics page shows ``n`` running requests: SGLang refreshes that gauge at
    prefill, every ``--decode-log-interval`` decode steps and when idle, so it lags a little."""
    async def check() -> bool:
        return (await b.refresh_load()).running == n
    await wait_until(check)


async def idle(b: SglangBackend) -> None:
    async def empty() -> bool:
        load = await b.refresh_load()
        return load.running == 0 and load.waiting == 0
    await wait_until(empty)


async def test_server_facts_come_from_the_server(backend: SglangBackend) -> None:
    info = backend.info
    assert info.backend == "sglang" and info.max_running == SLOTS
    assert info.max_model_len == 4096 and info.block_size == 1  # SGLang pages of one token
    assert info.kv_blocks_total == SglangOptions("").max_total_tokens


async def test_streamed_deltas_assemble_the_servers_own_text(backend: SglangBackend,
                                                             server: EngineServer) -> None:
    prompt = long_prompt(1, 200)
    events = await run(backend, "sg-stream", prompt, 48)
    assert isinstance(events[0], Queued) and isinstance(events[1], Allocated)
    deltas = [e for e in events if isinstance(e, TokenDelta)]
    fin = events[-1]
    assert isinstance(fin, Finished) and fin.reason == FinishReason.LENGTH
    assert len(deltas) >= 2  # streamed in pieces, each piece new text only
    assert "".join(d.text for d in deltas) == fin.text
    assert sum(d.tokens for d in deltas) == fin.usage.completion_tokens == 48
    async with httpx.AsyncClient(base_url=server.url, timeout=60.0) as client:
        whole = (await client.post("/generate", json={
            "text": prompt, "sampling_params": {"max_new_tokens": 48, "temperature": 0.0,
                                                "ignore_eos": True}})).json()
    assert whole["text"] == fin.text  # the cumulative chunks were not double counted
    assert whole["meta_info"]["prompt_tokens"] == fin.usage.prompt_tokens


async def test_greedy_is_deterministic_alone_repeated_and_in_a_batch(
        backend: SglangBackend) -> None:
    prompt = long_prompt(2, 150)
    alone = (await run(backend, "sg-det-0", prompt, 32))[-1].text
    again = (await run(backend, "sg-det-1", prompt, 32))[-1].text
    others = [run(backend, f"sg-det-o{i}", long_prompt(20 + i, 150), 32) for i in range(2)]
    batch = await asyncio.gather(run(backend, "sg-det-2", prompt, 32), *others)
    assert alone and again == alone and batch[0][-1].text == alone


class Stream:
    """A generation consumed in the background (a stream nobody reads is never sent)."""

    def __init__(self, b: SglangBackend, req: GenerationRequest) -> None:
        self.rid, self.events = req.request_id, []
        self.task = asyncio.create_task(self._consume(b.generate(req)))

    async def _consume(self, gen) -> Finished:
        async for ev in gen:
            self.events.append((time.monotonic(), ev))
        fin = self.events[-1][1]
        assert isinstance(fin, Finished)
        return fin

    def count(self, kind: type) -> int:
        return sum(isinstance(ev, kind) for _, ev in self.events)

    def first(self, kind: type) -> float | None:
        return next((t for t, ev in self.events if isinstance(ev, kind)), None)

    async def deltas(self, n: int) -> None:
        async def enough() -> bool:
            assert not self.task.done() or self.count(TokenDelta) >= n, self.events[-1]
            return self.count(TokenDelta) >= n
        await wait_until(enough, timeout=60.0)

    async def finished(self) -> Finished:
        return await asyncio.wait_for(self.task, 60.0)


async def waiting(b: SglangBackend, n: int) -> None:
    seen = []

    async def check() -> bool:
        seen.append(await b.refresh_load())
        return seen[-1].waiting == n
    try:
        await wait_until(check)
    except AssertionError:
        raise AssertionError(f"waiting never {n}: last {seen[-1]}, page "
                             f"{[ln for ln in (await _page(b)).splitlines() if 'queue_reqs' in ln]}"
                             ) from None


async def _page(b: SglangBackend) -> str:
    return (await b._client.get("/metrics")).text


async def abort_all(b: SglangBackend, streams: list[Stream]) -> None:
    for st in streams:
        await b.abort(st.rid)
        assert (await st.finished()).reason == FinishReason.ABORT
    await idle(b)


async def test_abort_of_a_running_request_ends_cleanly_and_frees_its_slot(
        backend: SglangBackend, server: EngineServer) -> None:
    st = Stream(backend, request("sg-abort-run", long_prompt(3, 100), 1500))
    await st.deltas(3)
    await running(backend, 1)
    assert await backend.abort("sg-abort-run") is True
    fin = await st.finished()
    assert fin.reason == FinishReason.ABORT
    assert 0 < fin.usage.completion_tokens < 1500
    await idle(backend)
    produced = (await metrics(server))["sglang:generation_tokens_total"]
    await asyncio.sleep(0.5)
    assert (await metrics(server))["sglang:generation_tokens_total"] == produced  # stopped
    assert await backend.abort("sg-abort-run") is False  # gone from the backend's books


async def test_abort_of_a_queued_request_ends_cleanly_and_frees_the_queue(
        backend: SglangBackend) -> None:
    blockers = [Stream(backend, request(f"sg-block-{i}", long_prompt(30 + i, 60), 1500))
                for i in range(SLOTS)]
    for st in blockers:
        await st.deltas(1)
    queued = Stream(backend, request("sg-abort-queued", long_prompt(4, 60), 16))
    await waiting(backend, 1)
    await running(backend, SLOTS)
    assert await backend.abort("sg-abort-queued") is True
    fin = await queued.finished()
    assert queued.count(Allocated) == 0 and queued.count(TokenDelta) == 0  # it never ran
    assert fin.reason == FinishReason.ABORT and fin.text == ""
    assert fin.usage.completion_tokens == 0
    await abort_all(backend, blockers)


async def test_load_is_read_from_the_metrics_page_by_name(backend: SglangBackend,
                                                          server: EngineServer) -> None:
    streams = [Stream(backend, request(f"sg-load-{i}", long_prompt(40 + i, 300), 1500))
               for i in range(2)]
    for st in streams:
        await st.deltas(1)
    await running(backend, 2)
    load = await backend.refresh_load()
    raw = await metrics(server)
    assert load.running == 2 == raw[SGLANG.running] and load.waiting == 0
    assert load.kv_blocks_total == SglangOptions("").max_total_tokens
    assert load.kv_blocks_used > 0 and backend.snapshot.kv_usage == pytest.approx(
        raw[SGLANG.usage], abs=0.05)
    await abort_all(backend, streams)


async def test_prefix_cache_hits_show_in_cached_tokens_and_the_hit_rate(
        backend: SglangBackend) -> None:
    prompt = long_prompt(5, 600)
    first = await run(backend, "sg-hit-1", prompt, 4)
    n = first[-1].usage.prompt_tokens
    assert first[-1].usage.cached_prompt_tokens < 16  # at most a shared opening
    second = await run(backend, "sg-hit-2", prompt, 4)
    cached = second[-1].usage.cached_prompt_tokens
    assert n - 2 <= cached < n  # the radix cache serves all but the last token(s)
    assert next(e for e in second if isinstance(e, Allocated)).cached_prompt_tokens == cached
    assert second[-1].text == first[-1].text
    await backend.refresh_load()
    assert backend.snapshot.hit_rate is not None and backend.snapshot.hit_rate > 0


async def test_fills_wait_behind_canonical_work_under_priority_scheduling(
        backend: SglangBackend) -> None:
    blockers = [Stream(backend, request(f"sg-prio-b{i}", long_prompt(50 + i, 60), 1500))
                for i in range(SLOTS)]
    for st in blockers:
        await st.deltas(1)
    fill = Stream(backend, request("sg-prio-fill", long_prompt(6, 60), 1500, Priority.FILL))
    await waiting(backend, 1)
    canonical = Stream(backend, request("sg-prio-canon", long_prompt(7, 60), 1500))
    await waiting(backend, 2)
    # the fill queued first, but the one slot freed goes to the canonical request
    await backend.abort("sg-prio-b0")
    await blockers[0].finished()
    await canonical.deltas(1)
    await waiting(backend, 1)
    assert fill.count(Allocated) == 0  # still waiting behind it
    await abort_all(backend, [*blockers[1:], canonical, fill])


# Kills the module's server (a second SGLang start costs a minute of CI): it must stay the
# module's last test, which pytest's file order guarantees.
async def test_a_server_dying_mid_stream_fails_the_stream_as_unavailable(
        server: EngineServer) -> None:
    victim = server
    b = _backend(victim)
    try:
        await b.start()
        st = Stream(b, request("sg-crash", long_prompt(8, 100), 1500))
        await st.deltas(2)
        victim.kill()  # SIGKILL to the HTTP server process, as a crash
        with pytest.raises(Unavailable, match="sg-crash"):
            await st.finished()
        assert not b._active  # nothing left on the books
        with pytest.raises(Unavailable):
            await b.refresh_load()
        with pytest.raises(Unavailable):
            [ev async for ev in b.generate(request("sg-after", "hello", 4))]
    finally:
        await b.close()
