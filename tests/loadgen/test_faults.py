"""The fault proxy on its own (delay, reset, black hole, heal), and a small fault matrix on the
local mesh: the csl killed and restarted, the gateways' path to an engine reset, under load; no
workflow is lost and every output equals the floor's (DESIGN.md §5.6)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from loadgen.bench.faults import QUICK, Cell, CellRun, FaultMesh, run_cell, run_floor
from loadgen.faults.mixed_load import ItemOutcome, kind_of
from loadgen.faults.proxy import FaultProxy, Mode
from loadgen.faults.report import floor_summary, summarize


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(4096):
        writer.write(data)
        await writer.drain()
    writer.close()


@pytest.fixture
async def proxy() -> AsyncIterator[FaultProxy]:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    fault = FaultProxy(f"127.0.0.1:{port}")
    await fault.start()
    yield fault
    await fault.close()
    server.close()


async def _connect(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(proxy.host, proxy.port)


async def _round_trip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      data: bytes = b"ping") -> bytes:
    writer.write(data)
    await writer.drain()
    return await asyncio.wait_for(reader.readexactly(len(data)), 5.0)


async def test_proxy_forwards_both_ways(proxy: FaultProxy) -> None:
    reader, writer = await _connect(proxy)
    assert await _round_trip(reader, writer, b"hello") == b"hello"
    assert proxy.counters.accepted == 1 and proxy.counters.bytes == 10
    writer.close()


async def test_delay_holds_each_chunk_in_each_direction(proxy: FaultProxy) -> None:
    reader, writer = await _connect(proxy)
    await _round_trip(reader, writer)
    proxy.delay(0.1)
    start = time.monotonic()
    assert await _round_trip(reader, writer) == b"ping"
    assert time.monotonic() - start >= 0.2  # one hold on the way in, one on the way out
    proxy.heal()
    assert proxy.mode is Mode.PASS and await _round_trip(reader, writer) == b"ping"
    writer.close()


async def test_reset_drops_open_and_new_connections_until_healed(proxy: FaultProxy) -> None:
    reader, writer = await _connect(proxy)
    await _round_trip(reader, writer)
    proxy.reset()
    with pytest.raises(ConnectionResetError):
        await _round_trip(reader, writer)
    reader, writer = await _connect(proxy)  # accepted, then reset at once
    with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
        await _round_trip(reader, writer)
    assert proxy.counters.resets == 2
    proxy.heal()
    reader, writer = await _connect(proxy)
    assert await _round_trip(reader, writer) == b"ping"
    writer.close()


async def test_blackhole_holds_bytes_and_delivers_them_on_heal(proxy: FaultProxy) -> None:
    reader, writer = await _connect(proxy)
    await _round_trip(reader, writer)
    proxy.blackhole()
    writer.write(b"held")
    await writer.drain()
    reply = asyncio.ensure_future(reader.readexactly(4))
    await asyncio.sleep(0.3)
    assert not reply.done()  # nothing came back through the black hole
    proxy.heal()
    assert await asyncio.wait_for(reply, 5.0) == b"held"  # nothing lost, only late
    writer.close()


@pytest.mark.slow
async def test_csl_kill_and_engine_path_reset_lose_nothing_and_match_the_floor(
        tmp_path: Path) -> None:
    params = dataclasses.replace(QUICK, floor_concurrency=8)
    cells = (Cell("csl SIGKILL", "csl", "kill"),
             Cell("gw<->engine-0 reset (drop)", "engine-0", "reset"))
    fm, runs = FaultMesh(params, run_dir=tmp_path), []
    try:
        await fm.start()
        for index, cell in enumerate(cells):
            if index:
                await fm.settle()
            runs.append(await run_cell(fm, cell, index))
        assert fm.proxies["engine-0"].counters.resets > 0  # the gateways' connections dropped
    finally:
        await fm.close()
    floor, exited = await run_floor(params, sorted(o.key for r in runs for o in r.outcomes))
    base = floor_summary(floor)
    assert base["lost"] == 0 and exited == []
    by_key = {o.key: o for o in floor}
    for run in runs:
        row = summarize(run, by_key, base)
        assert row["items"] > 0 and row["in_window"] > 0 and row["crashed"] == [], row
        assert row["lost"] == 0, row["lost_errors"]
        assert row["wrong"] == 0 and row["unverified"] == 0, row["wrong_keys"]


def _outcome(key: int, start: float, end: float, texts: tuple[str, ...] | None,
             retries: int = 0) -> ItemOutcome:
    out = ItemOutcome(key, kind_of(key), start, end, texts, retries)
    if texts is None:
        out.errors["UNAVAILABLE"] = retries + 1
    return out


def test_report_counts_lost_wrong_and_recovery_against_the_floor() -> None:
    floor = [_outcome(k, 0.0, 1.0, (f"text {k}",)) for k in range(4)]
    run = CellRun(Cell("csl SIGKILL", "csl", "kill"), [
        _outcome(0, 0.0, 1.0, ("text 0",)),            # before the fault
        _outcome(1, 1.5, 3.5, ("text 1",), retries=2),  # in the window, retried
        _outcome(2, 2.5, 3.0, ("changed",)),            # wrong
        _outcome(4, 2.0, 6.0, None, retries=4),         # lost
        _outcome(5, 4.2, 5.0, ("text 5",)),             # first normal one after the heal
    ], t_fault=1.2, t_heal=4.0)
    floor.append(_outcome(5, 0.0, 1.0, ("text 5",)))
    row = summarize(run, {o.key: o for o in floor}, floor_summary(floor))
    assert (row["items"], row["lost"], row["wrong"], row["retries"]) == (5, 1, 1, 6)
    assert row["wrong_keys"] == [2] and row["errors"] == {"UNAVAILABLE": 5}
    assert row["in_window"] == 2 and row["recover_s"] == 1.0
