"""How long a channel takes to use a restarted peer again after an outage: the mesh's channels
(reconnect back-off capped at ``reconnect_backoff_max_ms``) against gRPC's default back-off.

    .venv/bin/python scripts/reconnect_times.py [--outages 5 60] [--trials 2]

A health server is started, a channel connects, the server stops for the outage (the channel
keeps trying, so its back-off grows), the server comes back on the same port, and the time from
then to the first answered call is printed per trial. Trials of one outage run concurrently.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc  # noqa: E402
from grpc_health.v1 import health, health_pb2, health_pb2_grpc  # noqa: E402

from services.common.runtime import clients  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _serve(target: str) -> grpc.aio.Server:
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    server.add_insecure_port(target)
    await server.start()
    return server


async def trial(outage_s: float, capped: bool) -> float:
    """Seconds from the peer serving again to the first answered call."""
    target = f"127.0.0.1:{_free_port()}"
    server = await _serve(target)
    options = clients.channel_options() if capped else None
    async with grpc.aio.insecure_channel(target, options=options) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        await stub.Check(health_pb2.HealthCheckRequest(), timeout=2)
        await server.stop(0)
        end = time.monotonic() + outage_s
        while time.monotonic() < end:  # the channel keeps trying: its back-off grows
            channel.get_state(try_to_connect=True)
            await asyncio.sleep(0.05)
        server = await _serve(target)
        started = time.monotonic()
        try:
            await stub.Check(health_pb2.HealthCheckRequest(), timeout=180, wait_for_ready=True)
            return time.monotonic() - started
        finally:
            await server.stop(0)


async def main(outages: list[float], trials: int) -> None:
    for outage in outages:
        arms = [True, False] * trials
        took = await asyncio.gather(*(trial(outage, capped) for capped in arms))
        capped = ", ".join(f"{t:.2f}" for t, c in zip(took, arms, strict=True) if c)
        default = ", ".join(f"{t:.2f}" for t, c in zip(took, arms, strict=True) if not c)
        print(f"outage {outage:g} s: capped back-off {capped} s; gRPC default {default} s",
              flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--outages", type=float, nargs="+", default=[5.0, 60.0])
    parser.add_argument("--trials", type=int, default=2)
    args = parser.parse_args()
    asyncio.run(main(args.outages, args.trials))
