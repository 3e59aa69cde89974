"""Every public RPC of every service, fuzzed with hypothesis-generated request messages (and raw
bytes): each answer is a clean gRPC status (never UNKNOWN or INTERNAL, never a unary call left
hanging to its deadline), and no task is left behind.

The quick suite runs ``FUZZ_EXAMPLES`` inputs per method (a few hundred in all); set
``DYNBRANCH_FUZZ=full`` for the slow suite's run of more than 10,000 inputs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import message_factory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.pb import (
    admission_pb2,
    csl_pb2,
    delivery_pb2,
    engine_pb2,
    gateway_pb2,
)
from tests.fuzz.protofuzz import BackgroundMesh, messages

FULL = os.environ.get("DYNBRANCH_FUZZ", "") == "full"
#: Inputs per method: ~40 methods × 8 ≈ 320 in the quick suite, × 300 ≈ 12,000 in full.
FUZZ_EXAMPLES = 300 if FULL else 8
#: Codes that mean the service crashed on the input or hung on it.
BAD = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
UNARY_DEADLINE_S, STREAM_DEADLINE_S = 5.0, 2.0

METHODS = [(svc.full_name, m) for mod in (gateway_pb2, csl_pb2, admission_pb2, engine_pb2,
                                          delivery_pb2)
           for svc in mod.DESCRIPTOR.services_by_name.values() for m in svc.methods]
FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=not FULL,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture,
                                       HealthCheck.filter_too_much])


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BackgroundMesh]:
    with BackgroundMesh(Path(tmp_path_factory.mktemp("fuzz"))).running() as m:
        m.baseline_tasks = m.tasks()  # type: ignore[attr-defined]
        yield m


@pytest.fixture(scope="module")
def channels(mesh: BackgroundMesh) -> Iterator[dict[str, grpc.Channel]]:
    opened = {svc: grpc.insecure_channel(addr) for svc, addr in mesh.addresses.items()}
    yield opened
    for channel in opened.values():
        channel.close()


def _call(channel: grpc.Channel, service: str, method, payload) -> grpc.StatusCode:  # noqa: ANN001
    """Call ``method`` with ``payload`` (a message, or bytes sent as they are); the status."""
    path = f"/{service}/{method.name}"
    out = message_factory.GetMessageClass(method.output_type).FromString
    ser = (lambda b: b) if isinstance(payload, bytes) else (lambda m: m.SerializeToString())
    try:
        if not method.client_streaming and not method.server_streaming:
            channel.unary_unary(path, request_serializer=ser, response_deserializer=out)(
                payload, timeout=UNARY_DEADLINE_S)
        elif not method.client_streaming:
            call = channel.unary_stream(path, request_serializer=ser,
                                        response_deserializer=out)(payload,
                                                                   timeout=STREAM_DEADLINE_S)
            _drain(call)
        else:
            stream = channel.stream_stream if method.server_streaming else channel.stream_unary
            call = stream(path, request_serializer=ser, response_deserializer=out)(
                iter([payload, payload]), timeout=STREAM_DEADLINE_S)
            if method.server_streaming:
                _drain(call)
        return grpc.StatusCode.OK
    except grpc.RpcError as exc:
        code = exc.code()
        if code == grpc.StatusCode.DEADLINE_EXCEEDED and not method.server_streaming \
                and not method.client_streaming:
            return code  # a unary call that hung: reported as a failure below
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return grpc.StatusCode.OK  # a live stream (watch, generate) outlived our read
        if code == grpc.StatusCode.INTERNAL and isinstance(payload, bytes) and \
                "deserializ" in (exc.details() or "").lower():
            return grpc.StatusCode.INVALID_ARGUMENT  # grpc's own answer to unparsable bytes
        return code


def _drain(call) -> None:  # noqa: ANN001
    """Read a server stream's first few messages, then cancel it (watch streams never end)."""
    for i, _ in enumerate(call):
        if i >= 3:
            break
    call.cancel()


@pytest.mark.parametrize(("service", "method"), METHODS,
                         ids=[f"{s.split('.')[-1]}.{m.name}" for s, m in METHODS])
def test_every_rpc_answers_fuzzed_messages_with_a_clean_status(
        channels: dict[str, grpc.Channel], service: str, method) -> None:  # noqa: ANN001
    channel = channels[service]

    @FUZZ
    @given(messages(method.input_type))
    def check(request) -> None:  # noqa: ANN001
        code = _call(channel, service, method, request)
        assert code not in BAD | {grpc.StatusCode.DEADLINE_EXCEEDED}, \
            f"{method.full_name}: {code} on {request!r:.300}"

    check()


@FUZZ
@given(st.sampled_from(METHODS), st.binary(max_size=200))
def test_unparsable_request_bytes_get_a_clean_status(channels: dict[str, grpc.Channel],
                                                     target, raw: bytes) -> None:  # noqa: ANN001
    service, method = target
    code = _call(channels[service], service, method, raw)
    assert code not in BAD | {grpc.StatusCode.DEADLINE_EXCEEDED}, f"{method.full_name}: {code}"


def test_no_task_is_left_behind_after_fuzzing(mesh: BackgroundMesh,
                                              channels: dict[str, grpc.Channel]) -> None:
    """Runs after the fuzz tests (file order): the mesh's loop returns to its baseline."""
    end = time.monotonic() + 15
    while mesh.tasks() > mesh.baseline_tasks + 2 and time.monotonic() < end:  # type: ignore[attr-defined]
        time.sleep(0.2)
    assert mesh.tasks() <= mesh.baseline_tasks + 2, \
        f"{mesh.tasks()} tasks vs {mesh.baseline_tasks} before fuzzing"  # type: ignore[attr-defined]
