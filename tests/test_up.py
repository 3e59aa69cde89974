"""``dynbranch up`` with no flags serves every built-in workflow end to end, the retrieval corpus
included (a retrieve finds a document written through the gateway); its port flags and
``--set`` reach the gateway, environment settings are honoured below explicit flags; a clean
stop stops the gateways before admission, so no outcome report is lost."""

from __future__ import annotations

import asyncio
import json
import random
import re
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest

from loadgen.demo import FUNCTIONS
from loadgen.workloads import WORKLOADS, DataUnavailable, SimClock, Trace, get_workload
from services.gateway import DynbranchClient
from tests.test_cli import printed, up_lines

TITLE = "Quillivant Ferromancy"
TEXT = "Quillivant Ferromancy is the up test's own document, written through the gateway."


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


async def _serve_every_workflow(gateway: str) -> dict[str, int]:
    """Stage calls of one instance of each built-in workflow; then a write and its retrieval."""
    clock, rng, calls = SimClock(0.01), random.Random(0), {}
    async with DynbranchClient(gateway, timeout_s=30.0) as sdk:
        for name in WORKLOADS:
            workload = get_workload(name)
            sdk.use_builtin(workload.template)
            trace = Trace(sdk, workload.template, f"up-{name}", clock)
            await workload.run(trace, workload.instances(1, rng)[0])
            calls[name] = len(trace.stages)
        assert await sdk.write(upserts=[("up-test-doc", TITLE, TEXT)])
        assert (await sdk.write(record_ids=["up-test-record"]))["up-test-record"] > 0
        found = await sdk.call_stage("react", "retrieve", workflow_id="up-retrieve",
                                     inputs={"question": "?", "notes": "none"}, candidate=TITLE)
        assert "the up test's own document" in found.text
        # a branch left open (never settled): the gateway's close reports its outcome
        await sdk.call_stage("routing", "router", workflow_id="up-open", offered=FUNCTIONS,
                             inputs={"functions": json.dumps([{"name": f} for f in FUNCTIONS]),
                                     "query": "Where is my parcel?"})
    return calls


def _logs(run_dir: Path) -> dict[str, list[dict]]:
    return {log.stem: [json.loads(line) for line in log.read_text().splitlines()
                       if line.startswith("{")] for log in run_dir.glob("*.log")}


def _ts(lines: list[dict], msg: str) -> float:
    return next(line["ts"] for line in lines if msg in line["msg"])


def test_up_with_defaults_serves_every_workflow_and_loses_no_outcome_on_stop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        for name in WORKLOADS:
            get_workload(name).pool()
    except DataUnavailable as exc:
        pytest.skip(str(exc))
    grpc_port, env_http, set_http = _free_ports(3)
    monkeypatch.setenv("DYNBRANCH_GATEWAY_PORT", str(grpc_port))  # honoured: no flag says else
    monkeypatch.setenv("DYNBRANCH_GATEWAY_HTTP_PORT", str(env_http))  # --set below wins
    args = ["--time-scale", "0.01", "--keep-logs", "--set", f"gateway.http_port={set_http}"]
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    with up_lines(args, tmp_path) as lines:
        assert "retrieval corpus: hotpotqa in the run folder" in "".join(lines)
        assert printed(lines, r"tracing: (\w+)") == "off"
        gateway = printed(lines, r"--gateway (\S+)")
        assert gateway == f"127.0.0.1:{grpc_port}"
        assert printed(lines, r"openai-compatible API: http://\S+:(\d+)/v1") == str(set_http)
        calls = asyncio.run(_serve_every_workflow(gateway))
        assert set(calls) == set(WORKLOADS) and min(calls.values()) >= 2, calls
    [run_dir] = tmp_path.glob("dynbranch-run-*")  # kept: --keep-logs
    logs = _logs(run_dir)
    assert not [line for line in logs["gateway"] if "ReportOutcome failed" in line["msg"]]
    # admission heard its stop only after the gateway had closed (reporting every outcome)
    assert _ts(logs["admission"], "signal received") > _ts(logs["gateway"], "gateway stopped")
    assert re.search(r"loaded \d+ documents of hotpotqa",
                     " ".join(line["msg"] for line in logs["corpus"]))


def test_up_says_whether_tracing_is_on_and_where_spans_go() -> None:
    """From each service's ``otlp_endpoint`` as it announced it (``Child.otlp_endpoint``)."""
    from services.cli import _tracing_line

    def children(*endpoints: str) -> list[SimpleNamespace]:
        names = ["gateway", "engine-0", "csl"]
        return [SimpleNamespace(name=name, otlp_endpoint=endpoint)
                for name, endpoint in zip(names, endpoints, strict=True)]

    assert _tracing_line(children("", "", "")).startswith(
        "tracing: off (no OTLP endpoint; OTEL_EXPORTER_OTLP_ENDPOINT=HOST:PORT")
    assert _tracing_line(children(*["otel:4317"] * 3)) == (
        "tracing: on, spans exported over OTLP gRPC to otel:4317 (every service)")
    assert _tracing_line(children("otel:4317", "", "otel:4317")) == (
        "tracing: on, spans exported over OTLP gRPC to otel:4317 (gateway, csl); off in engine-0")
