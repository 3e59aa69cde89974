"""``dynbranch bench overhead``: what the gateway adds to a stage call.

Side by side in one run, on loopback, with the sim at zero step time and the subgraph library
on: a stage call through the gateway that misses the library (a fresh prompt each time: derive
the reuse name, skip the lookup through the name mirror, execute, store in the background), the
same generation sent directly to the engine agent, a call the library answers (a repeated
prompt: one lookup hop, no engine work), and a bare gRPC echo round trip. The kinds of call are
interleaved so that they share the machine's noise.

CPU per call of every process is measured for a miss, a hit, a direct engine call and an echo in
alternating closed-loop rounds (concurrency 8), and set against the echo's client + server
(``cpu_ratios``); the direct call's engine-agent CPU is the simulated engine's own work, which a
miss pays too. The client sends its demands on the gateway's CallMux stream (``GatewayClient``)
and the gateway reaches the engine and the library on streams too, while the echo is a unary
call each: at concurrency 8 a stream message can carry several callers' exchanges. The same is
measured one call at a time (``cpu_ratios_concurrency_1``), where nothing batches.
A sweep then runs echo, the direct engine call and the gateway path at concurrency 1, 8, 64 and
512: calls/s of each, the gateway's added latency (its p50/p99 less the direct call's at the
same concurrency) and calls/s per gateway core (1,000 / the gateway process's CPU ms per call).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from loadgen.bench.load import cpu_seconds
from loadgen.meshes.echo_server import METHOD as ECHO_METHOD
from services.common.pb import common_pb2, engine_pb2, gateway_pb2
from services.common.runtime.clients import open_channel
from services.engine_agent import EngineAgentClient
from services.gateway import GatewayClient
from services.launcher import MeshSpec, ProcessMesh

PROMPT = "Route this request to billing, shipping, returns or technical: my card was charged twice."
MAX_TOKENS = 16
MODEL = "bench-model"
#: Closed-loop workers of the throughput rounds (one client process).
CONCURRENCY = 8
#: Concurrencies of the sweep, and the calls made at each (quick, full): enough for a p99.
SWEEP = (1, 8, 64, 512)
SWEEP_CALLS = {True: {1: 150, 8: 300, 64: 512, 512: 1024},
               False: {1: 1000, 8: 2000, 64: 4000, 512: 8192}}


def _sampling() -> common_pb2.SamplingParams:
    return common_pb2.SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True)


def _prompt(i: int) -> str:
    return f"{PROMPT} (ticket {i})"


async def _direct(engine: EngineAgentClient, i: int) -> None:
    # The same request the gateway sends: the answer only, on a shared GenerateMux stream.
    request = engine_pb2.GenerateRequest(request_id=f"direct-{i}", model=MODEL,
                                         prompt=_prompt(i), sampling=_sampling(),
                                         final_only=True)
    finished = await engine.answer(request, timeout_s=10)
    if finished.usage.completion_tokens != MAX_TOKENS:
        raise RuntimeError(f"direct call {i}: {finished.usage.completion_tokens} tokens")


async def _gateway(gateway: GatewayClient, i: int, prompt: str | None = None,
                   expect: int = gateway_pb2.RESULT_SOURCE_ENGINE) -> None:
    demand = common_pb2.StageDemand(model=MODEL, prompt=prompt or _prompt(i),
                                    sampling=_sampling())
    demand.header.id = f"gw-{i}"
    reply = await gateway.call(gateway_pb2.CallRequest(demand=demand), timeout_s=10)
    if reply.source != expect:
        raise RuntimeError(f"call {i}: expected source {expect}, got {reply.source}")


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _interleaved(calls: dict[str, Callable[[int], Awaitable[Any]]], n: int,
                       offset: int = 0) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for i in range(offset, offset + n):
        for name, call in calls.items():
            start = time.perf_counter()
            await call(i)
            samples[name].append(time.perf_counter() - start)
    return samples


async def _closed_loop(call: Callable[[int], Awaitable[Any]], total: int, concurrency: int,
                      offset: int = 0) -> tuple[float, list[float]]:
    """Calls/s of ``total`` calls made by ``concurrency`` workers (a closed loop), and each
    call's latency in seconds."""
    counter = iter(range(offset, offset + total))
    latencies: list[float] = []

    async def worker() -> None:
        for i in counter:
            start = time.perf_counter()
            await call(i)
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return total / (time.perf_counter() - start), latencies


async def _throughputs(calls: dict[str, Callable[[int], Awaitable[Any]]], total: int,
                       rounds: int, pids: dict[str, int], concurrency: int = CONCURRENCY
                       ) -> tuple[dict[str, list[float]], dict[str, dict[str, float]]]:
    """Calls/s of each kind, in alternating rounds so that they share the machine's noise, and
    the CPU milliseconds each process spent per call of each kind (summed over the rounds)."""
    rates: dict[str, list[float]] = {name: [] for name in calls}
    cpu: dict[str, dict[str, float]] = {name: dict.fromkeys(pids, 0.0) for name in calls}
    offset = 20_000_000 + 1_000_000 * concurrency
    for r in range(rounds):
        for name, call in calls.items():
            before = {k: cpu_seconds(p) for k, p in pids.items()}
            rate, _ = await _closed_loop(call, total, concurrency, offset=offset + r * total)
            rates[name].append(rate)
            for k, p in pids.items():
                cpu[name][k] += 1000 * (cpu_seconds(p) - before[k]) / (total * rounds)
    return rates, {n: {k: round(v, 3) for k, v in per.items()} for n, per in cpu.items()}


def _ratios(cpu_ms: dict[str, dict[str, float]], server: str) -> dict[str, float]:
    """CPU per miss and per hit against a bare echo's (client + server), whole path and per
    process, and the gateway's share against one echo server's."""
    echo = cpu_ms["echo"]["client"] + cpu_ms["echo"][server]
    mesh = ("client", "gateway", "engine-0", "csl")
    out: dict[str, float] = {}
    for kind in ("gateway", "hit", "direct"):
        label = "miss" if kind == "gateway" else kind
        out[f"{label}_whole_path"] = round(sum(cpu_ms[kind][k] for k in mesh) / echo, 3)
        out |= {f"{label}_{k}": round(cpu_ms[kind][k] / echo, 3) for k in mesh}
        if kind != "direct":
            out[f"{label}_gateway_to_echo_server"] = round(cpu_ms[kind]["gateway"]
                                                           / cpu_ms["echo"][server], 3)
    return out


async def _sweep(calls: dict[str, Callable[[int], Awaitable[Any]]], quick: bool,
                 gateway_pid: int) -> list[dict[str, Any]]:
    """Calls/s of echo, direct and gateway at each concurrency; the gateway's added latency
    and its calls/s per core of the gateway process."""
    rows = []
    for c in SWEEP:
        total = SWEEP_CALLS[quick][c]
        row: dict[str, Any] = {"concurrency": c, "calls": total}
        lat: dict[str, list[float]] = {}
        for name in ("echo", "direct", "gateway"):
            before = cpu_seconds(gateway_pid)
            rate, lat[name] = await _closed_loop(calls[name], total, c, 40_000_000 + c * 100_000)
            row[f"{name}_calls_per_s"] = round(rate, 1)
            if name == "gateway":
                ms = 1000 * (cpu_seconds(gateway_pid) - before) / total
                row["gateway_cpu_ms_per_call"] = round(ms, 3)
                row["calls_per_s_per_gateway_core"] = round(1000 / ms, 1) if ms > 0 else None
        for q, label in ((.5, "p50"), (.99, "p99")):
            added = _quantile(lat["gateway"], q) - _quantile(lat["direct"], q)
            row[f"added_{label}_ms"] = round(1000 * added, 3)
            row[f"gateway_{label}_ms"] = round(1000 * _quantile(lat["gateway"], q), 3)
            row[f"echo_{label}_ms"] = round(1000 * _quantile(lat["echo"], q), 3)
        rows.append(row)
    return rows


async def _run(quick: bool) -> dict[str, Any]:
    n, warmup = (300, 50) if quick else (2000, 200)
    mesh = ProcessMesh()
    spec = MeshSpec(engines=1, model=MODEL, preset="zero", time_scale=0.0, others=("csl",),
                    log_level="WARNING")
    try:
        await mesh.start(spec)
        echo = await mesh.spawn("echo", "loadgen.meshes.echo_server", [])
        engine = EngineAgentClient(mesh.address("engine-0"))
        gateway = GatewayClient(mesh.address("gateway"))
        echo_channel = open_channel(echo.address)
        echo_call = echo_channel.unary_unary(ECHO_METHOD)
        await _gateway(gateway, -1, PROMPT)  # the entry every "hit" call is served from
        await asyncio.sleep(0.5)  # its store lands and the mirror learns the name
        hit = gateway_pb2.RESULT_SOURCE_LIBRARY
        calls = {"direct": lambda i: _direct(engine, i), "gateway": lambda i: _gateway(gateway, i),
                 "hit": lambda i: _gateway(gateway, i, PROMPT, hit),
                 "echo": lambda i: echo_call(b"x" * 64, timeout=5)}
        await _interleaved(calls, warmup, offset=1_000_000)
        samples = await _interleaved(calls, n)
        pids = {c.name: c.process.pid for c in mesh.children} | {"client": os.getpid()}
        kinds = {k: calls[k] for k in ("gateway", "hit", "direct", "echo")}
        rates, cpu_ms = await _throughputs(kinds, total=n, rounds=3, pids=pids)
        # One caller at a time: nothing to batch on the streams (the floor of each message).
        _, cpu_ms_c1 = await _throughputs(kinds, total=n // 2, rounds=3, pids=pids,
                                          concurrency=1)
        sweep = await _sweep(calls, quick, pids["gateway"])
        await asyncio.gather(engine.close(), gateway.close(), echo_channel.close())
    finally:
        await mesh.stop()
    ms = {k: [v * 1000 for v in vs] for k, vs in samples.items()}
    direct_p50, gateway_p50 = statistics.median(ms["direct"]), statistics.median(ms["gateway"])
    return {
        "calls": n, "max_tokens": MAX_TOKENS, "simulated": True, "preset": "zero",
        "direct_p50_ms": round(direct_p50, 3),
        "direct_p99_ms": round(_quantile(ms["direct"], .99), 3),
        "gateway_p50_ms": round(gateway_p50, 3),
        "gateway_p99_ms": round(_quantile(ms["gateway"], .99), 3),
        "added_p50_ms": round(gateway_p50 - direct_p50, 3),
        "echo_p50_ms": round(statistics.median(ms["echo"]), 3),
        "library_hit_p50_ms": round(statistics.median(ms["hit"]), 3),
        "gateway_to_direct_ratio": round(gateway_p50 / direct_p50, 3),
        "concurrency": CONCURRENCY,
        "calls_per_s": round(statistics.median(rates["gateway"]), 1),
        "echo_calls_per_s": round(statistics.median(rates["echo"]), 1),
        "gateway_to_echo_throughput": round(
            statistics.median(g / e for g, e in zip(rates["gateway"], rates["echo"],
                                                    strict=True)), 3),
        "throughput_rounds": {k: [round(v, 1) for v in vs] for k, vs in rates.items()},
        "cpu_ms_per_call": cpu_ms,
        "cpu_ratios": _ratios(cpu_ms, "echo"),
        "cpu_ms_per_call_concurrency_1": cpu_ms_c1,
        "cpu_ratios_concurrency_1": _ratios(cpu_ms_c1, "echo"),
        "calls_per_s_per_gateway_core": {
            k: round(1000 / cpu_ms[k]["gateway"], 1) if cpu_ms[k]["gateway"] > 0 else None
            for k in ("gateway", "hit")},
        "sweep": sweep,
        "cores": os.cpu_count(),
    }


def run(quick: bool) -> dict[str, Any]:
    """Run the benchmark, print a readable summary, return the JSON figures."""
    result = asyncio.run(_run(quick))
    print(f"overhead ({result['calls']} interleaved calls each, sim at zero step time, "
          f"{MAX_TOKENS} tokens/call; SIMULATED engine)")
    print(f"  direct to engine agent  p50 {result['direct_p50_ms']:.3f} ms  "
          f"p99 {result['direct_p99_ms']:.3f} ms")
    print("  through the gateway (library miss)")
    print(f"                          p50 {result['gateway_p50_ms']:.3f} ms  "
          f"p99 {result['gateway_p99_ms']:.3f} ms")
    print(f"  gateway adds            p50 {result['added_p50_ms']:.3f} ms (target <= 1 ms)")
    print(f"  library hit (no engine) p50 {result['library_hit_p50_ms']:.3f} ms")
    print(f"  bare gRPC echo          p50 {result['echo_p50_ms']:.3f} ms")
    print(f"  throughput at concurrency {result['concurrency']} (one client process, median of "
          f"3 alternating rounds): gateway {result['calls_per_s']:.0f} calls/s, bare echo "
          f"{result['echo_calls_per_s']:.0f} calls/s; gateway/echo "
          f"{result['gateway_to_echo_throughput']:.2f} (target >= 0.5)")
    for kind, per in result["cpu_ms_per_call"].items():
        spent = ", ".join(f"{k} {v:.3f}" for k, v in per.items() if v >= 0.005)
        print(f"  CPU ms per {kind} call: {spent} (total {sum(per.values()):.3f}; "
              f"{result['cores']} cores)")
    r = result["cpu_ratios"]
    print(f"  CPU x echo (client + server): miss {r['miss_whole_path']:.2f} (target <= 3), "
          f"hit {r['hit_whole_path']:.2f} (target <= 2); gateway / echo server: miss "
          f"{r['miss_gateway_to_echo_server']:.2f}, hit {r['hit_gateway_to_echo_server']:.2f} "
          f"(target <= 1); a direct engine call {r['direct_whole_path']:.2f}")
    r1 = result["cpu_ratios_concurrency_1"]
    print(f"  the same, one call at a time (no batching on the streams): miss "
          f"{r1['miss_whole_path']:.2f}, hit {r1['hit_whole_path']:.2f}; gateway / echo server: "
          f"miss {r1['miss_gateway_to_echo_server']:.2f}, hit "
          f"{r1['hit_gateway_to_echo_server']:.2f}")
    per_core = result["calls_per_s_per_gateway_core"]
    print(f"  calls/s per gateway core (concurrency {CONCURRENCY}): miss {per_core['gateway']}, "
          f"hit {per_core['hit']}")
    print("  concurrency  echo/s  direct/s  gateway/s  per-gw-core/s  added p50 / p99 ms")
    for row in result["sweep"]:
        print(f"  {row['concurrency']:>11}  {row['echo_calls_per_s']:>6.0f}  "
              f"{row['direct_calls_per_s']:>8.0f}  {row['gateway_calls_per_s']:>9.0f}  "
              f"{row['calls_per_s_per_gateway_core'] or 0:>13.0f}  "
              f"{row['added_p50_ms']:.3f} / {row['added_p99_ms']:.3f}")
    return result


__all__ = ["run"]
