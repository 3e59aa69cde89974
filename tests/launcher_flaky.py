"""A child for tests/test_launcher.py: a gRPC health server whose second start dies by SIGKILL
before announcing (its starts are counted in the file ``--counter`` names)."""

import argparse
import asyncio
import json
import os
import signal
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc


async def _serve(port: int) -> None:
    server = grpc.aio.server()
    servicer = health.aio.HealthServicer()
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(json.dumps({"address": f"127.0.0.1:{bound}", "port": bound}), flush=True)
    await server.wait_for_termination()


parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, default=0)
parser.add_argument("--metrics-port", type=int, default=-1)
parser.add_argument("--counter", required=True)
args = parser.parse_args()
counter = Path(args.counter)
starts = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(starts))
if starts == 2:
    os.kill(os.getpid(), signal.SIGKILL)
asyncio.run(_serve(args.port))
