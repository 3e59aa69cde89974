"""The gateway's gRPC edge on a real mesh (port 0): a bad write or template is refused by field
with a status that says so (never UNAVAILABLE "retry", never INTERNAL), and a message quotes at
most a bounded prefix of what it was sent (issue 38)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from services.common.pb import gateway_pb2, gateway_pb2_grpc
from services.common.values.errors import InvalidArgument
from services.common.values.reads import MAX_WRITE_RECORDS
from services.gateway.templates import MAX_TEMPLATE_BYTES, MAX_TEMPLATE_DEPTH
from tests.factories import call_request, csl_service, engine_agent, gateway

INVALID, TOO_MANY = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED
TEMPLATE = ("id: t\nversion: 1\nmodel: test-model\n"
            "stages: [{id: a, kind: llm, prompt: p, sampling: {max_tokens: 4}}]\n")


@pytest.fixture
async def mesh(tmp_path: Path) -> AsyncIterator[tuple[Any, gateway_pb2_grpc.GatewayStub]]:
    async with engine_agent() as eng, csl_service(tmp_path / "csl") as csl, \
            gateway([eng.address], csl=csl.address) as gw, \
            grpc.aio.insecure_channel(gw.address) as channel:
        yield gw, gateway_pb2_grpc.GatewayStub(channel)


async def refusal(call: Any) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    return err.value.code(), err.value.details() or ""


async def test_a_bad_write_is_refused_by_field_never_as_a_failed_dependency(mesh) -> None:  # type: ignore[no-untyped-def]
    _, stub = mesh

    def write(record_ids: list[str]) -> Any:
        return stub.WriteRecords(gateway_pb2.GatewayWriteRequest(record_ids=record_ids),
                                 timeout=10)

    assert await refusal(write(["a", ""])) == (INVALID, "record_ids[1]: required")
    assert await refusal(write(["é" * 600])) == (INVALID,
                                                 "record_ids[0]: longer than 1024 bytes")
    code, details = await refusal(write(["é" * 300]))  # valid, but no store can key it
    assert code == INVALID and details.startswith("record_ids[0]: 6")
    assert details.endswith("a written record takes at most 509")  # was INTERNAL, "retry"
    assert await refusal(write([f"r{i}" for i in range(10_000)])) == (
        TOO_MANY, f"record_ids: at most {MAX_WRITE_RECORDS} records per write, got 10000")
    assert [v.record_id for v in (await write(["a", "b"])).versions] == ["a", "b"]


async def test_the_library_adapter_keeps_a_csl_refusal_a_refusal(mesh) -> None:  # type: ignore[no-untyped-def]
    gw, _ = mesh
    with pytest.raises(InvalidArgument) as err:  # was Unavailable: "nothing written, retry"
        await gw.core.library.write_records("", ["ok", ""])
    assert err.value.field == "writes[1].record_id" and not err.value.retryable


@pytest.mark.parametrize("text, code, starts", [
    ("a: " + "[" * 5000 + "]" * 5000, INVALID,
     f"yaml: nested deeper than {MAX_TEMPLATE_DEPTH} levels"),  # was INTERNAL
    ("a: " + "{b: " * 3000 + "1" + "}" * 3000, INVALID, "yaml: nested deeper than"),
    ("description: " + "x" * MAX_TEMPLATE_BYTES, TOO_MANY, "yaml: larger than 262144 bytes"),
    ("id: t\nversion: 1\nstages:\n" + "".join(
        f"  - {{id: s{i}, kind: llm, prompt: p, model: m, sampling: {{max_tokens: 1}}}}\n"
        for i in range(300)), INVALID, "template t: stages: at most 256 entries, got 300"),
    ("id: '" + "!" * 100_000 + "'\nversion: 1\nstages: []\n", INVALID, "template ?: id: '!!!"),
])
async def test_a_bad_template_is_refused_naming_the_field(mesh, text: str, code: grpc.StatusCode,
                                                          starts: str) -> None:  # type: ignore[no-untyped-def]
    _, stub = mesh
    got, details = await refusal(stub.RegisterTemplate(
        gateway_pb2.RegisterTemplateRequest(yaml=text), timeout=10))
    assert got == code and details.startswith(starts), details
    assert len(details) < 400
    registered = await stub.RegisterTemplate(gateway_pb2.RegisterTemplateRequest(
        yaml=TEMPLATE), timeout=10)
    assert registered.template_id == "t"


async def test_a_call_quotes_a_bounded_prefix_of_what_it_was_sent(mesh) -> None:  # type: ignore[no-untyped-def]
    _, stub = mesh
    model = await refusal(stub.Call(call_request(model="m" * 100_000), timeout=10))
    template = await refusal(stub.Call(call_request(template_id="t" * 50_000, stage_id="s"),
                                       timeout=10))
    assert model[0] == INVALID and "(100002 characters)" in model[1] and len(model[1]) < 300
    assert template[0] == grpc.StatusCode.NOT_FOUND and len(template[1]) < 300
