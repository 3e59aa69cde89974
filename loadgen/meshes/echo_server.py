"""A bare gRPC echo server (identity bytes, no interceptors): the floor of one loopback hop."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal

import grpc

from services.common.runtime.server import install_uvloop

METHOD = "/dynbranch.bench.Echo/Echo"


async def _echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return request


async def serve(port: int) -> None:
    """Serve the echo method until SIGTERM."""
    server = grpc.aio.server()
    handler = grpc.method_handlers_generic_handler(
        "dynbranch.bench.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(_echo)})
    server.add_generic_rpc_handlers((handler,))
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(json.dumps({"event": "listening", "service": "echo", "address": f"127.0.0.1:{bound}",
                      "port": bound, "metrics_port": None}), flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(1)


def main() -> None:
    """Entry point (accepts the launcher's --port/--metrics-port flags)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--metrics-port", type=int, default=-1, help="ignored")
    args = parser.parse_args()
    install_uvloop()
    asyncio.run(serve(args.port))


if __name__ == "__main__":
    main()
