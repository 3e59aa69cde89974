"""The gRPC front door fuzzed with seeded, hostile inputs (issue 38): the gateway's ``Call``,
``WriteRecords`` and ``RegisterTemplate``, the csl's ``WriteRecords``, and garbage bytes sent as
each of their requests (a raw ``unary_unary`` with identity serializers).

Inputs are mostly valid-shaped messages with a few fields made hostile (empty, huge or odd
unicode strings, huge repeated fields and maps, extreme integers, NaN and infinities, unknown
templates), plus YAML nested past the depth limit, oversized, aliased or not YAML at all, and
bytes that are no request (truncated and bit-flipped requests, over-long varints, bad UTF-8,
deep groups). Every answer must be a status other than INTERNAL or UNKNOWN, come back before
the deadline, and carry a message under 2 KB (UTF-8); afterwards the gateway still answers a
valid call and the csl a valid write.

The default run is ``DEFAULT_CASES`` inputs in all, derandomized (the same inputs every run).
``DYNBRANCH_FUZZ_CASES=N`` (or ``DYNBRANCH_FUZZ=full``: 10,000) runs the campaign test, N inputs
in the same shares; it is marked slow and skipped unless one of them is set, because CI runs
slow tests too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.pb import common_pb2, csl_pb2, gateway_pb2
from services.gateway.templates import MAX_TEMPLATE_BYTES, MAX_TEMPLATE_DEPTH
from tests.factories import MODEL, call_request
from tests.fuzz.protofuzz import BackgroundMesh, messages

#: Codes that mean a service crashed on an input (or gRPC could not map what it raised).
BAD = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.DEADLINE_EXCEEDED}
#: Every call must be answered within this (the slowest valid call, 32,768 decoded tokens on
#: the zero-time sim, takes under a second).
DEADLINE_S = 10.0
#: A status message a client can always read (gRPC refuses trailers past ~16 KB).
MAX_DETAILS_BYTES = 2048
DEFAULT_CASES = 320
CAMPAIGN_CASES = int(os.environ.get("DYNBRANCH_FUZZ_CASES") or (
    10_000 if os.environ.get("DYNBRANCH_FUZZ") == "full" else 0))
#: Each target's share of the inputs.
SHARES = {"call": 0.35, "gateway_write": 0.2, "csl_write": 0.1, "template": 0.2, "raw": 0.15}
CALL, GW_WRITE, TEMPLATE = ("/dynbranch.v1.Gateway/Call", "/dynbranch.v1.Gateway/WriteRecords",
                            "/dynbranch.v1.Gateway/RegisterTemplate")
CSL_WRITE = "/dynbranch.v1.SubgraphLibrary/WriteRecords"
RESPONSES: dict[str, type[Message]] = {
    CALL: gateway_pb2.CallResponse, GW_WRITE: gateway_pb2.GatewayWriteResponse,
    TEMPLATE: gateway_pb2.RegisterTemplateResponse, CSL_WRITE: csl_pb2.WriteRecordsResponse}
#: Fuzzed calls made in this process, by method and whether garbage bytes were sent.
CALLS: Counter[str] = Counter()


class FrontMesh(BackgroundMesh):
    """An engine agent, a csl, a corpus service and a gateway over them (auth off), served
    from a thread so that hypothesis tests call them with blocking stubs."""

    async def _serve(self) -> None:
        from tests.factories import corpus_service, csl_service, engine_agent, gateway

        self._stop = asyncio.Event()
        async with contextlib.AsyncExitStack() as stack:
            eng = await stack.enter_async_context(engine_agent(engine_id="engine-0"))
            csl = await stack.enter_async_context(csl_service(self.folder / "csl"))
            corpus = await stack.enter_async_context(corpus_service(self.folder / "corpus"))
            gw = await stack.enter_async_context(gateway(
                [eng.address], csl=csl.address, corpus=corpus.address))
            self.addresses = {"gateway": gw.address, "csl": csl.address}
            self._ready.set()
            await self._stop.wait()


@pytest.fixture(scope="module")
def channels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, grpc.Channel]]:
    with FrontMesh(Path(tmp_path_factory.mktemp("grpc-fuzz"))).running() as mesh:
        opened = {name: grpc.insecure_channel(addr) for name, addr in mesh.addresses.items()}
        try:
            yield opened
        finally:
            for channel in opened.values():
                channel.close()


def answer(channels: dict[str, grpc.Channel], method: str, request: Message | bytes,
           fuzzed: bool = True) -> tuple[grpc.StatusCode, str]:
    """Send ``request`` (bytes go as they are) and check the answer's status, time and size."""
    channel = channels["csl" if method == CSL_WRITE else "gateway"]
    serialize: Callable[[Any], bytes] = (
        (lambda raw: raw) if isinstance(request, bytes) else (lambda m: m.SerializeToString()))
    call = channel.unary_unary(method, request_serializer=serialize,
                               response_deserializer=RESPONSES[method].FromString)
    start = time.monotonic()
    try:
        call(request, timeout=DEADLINE_S)
        code, details = grpc.StatusCode.OK, ""
    except grpc.RpcError as exc:
        code, details = exc.code(), exc.details() or ""
    elapsed = time.monotonic() - start
    if fuzzed:
        CALLS[method + (" (bytes)" if isinstance(request, bytes) else "")] += 1
    shown = f"{request[:200]!r}" if isinstance(request, bytes) else f"{str(request)[:300]!r}"
    assert code not in BAD, f"{method}: {code.name} {details[:300]!r} on {shown}"
    assert elapsed < DEADLINE_S, f"{method}: {elapsed:.2f} s on {shown}"
    assert len(details.encode()) < MAX_DETAILS_BYTES, f"{method}: {len(details)} characters"
    return code, details


def assert_still_serving(channels: dict[str, grpc.Channel]) -> None:
    """The gateway answers a valid call, and the csl a valid write, after the fuzzing."""
    assert answer(channels, CALL, call_request(), fuzzed=False)[0] == grpc.StatusCode.OK
    write = csl_pb2.WriteRecordsRequest(writes=[csl_pb2.RecordWrite(record_id="alive")])
    assert answer(channels, CSL_WRITE, write, fuzzed=False)[0] == grpc.StatusCode.OK


# --- values ------------------------------------------------------------------------------------

ODD_TEXT = ["", " ", "\x00", "é", "\U0001d518\U0001d52b\U0001d526", "\u200b\u202e\ufeff",
            "\U0010ffff", "../../etc/passwd", "%s%n{0}", "{{query}}", "a/b", "routing/router"]


def huge_text() -> st.SearchStrategy[str]:
    """Strings of 300 to 1.1 million characters (one- to four-byte ones), built cheaply."""
    return st.builds(lambda c, n: c * n, st.sampled_from(["x", "é", "\U0001d518", "\x00", "ab "]),
                     st.sampled_from([300, 5_000, 70_000, 1_100_000]))


def small_text(*plausible: str) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from([*plausible, *ODD_TEXT]),
                     st.text(st.characters(exclude_categories=("Cs",)), max_size=40))


def text(*plausible: str) -> st.SearchStrategy[str]:
    return st.one_of(small_text(*plausible), huge_text())


def many(item: st.SearchStrategy[Any], small: st.SearchStrategy[Any] | None = None
         ) -> st.SearchStrategy[list[Any]]:
    """A few items, or one ``small`` item repeated up to 10,000 times (huge repeated fields,
    under gRPC's 4 MB message limit)."""
    repeated = st.builds(lambda v, n: [v] * n, small if small is not None else item,
                         st.sampled_from([257, 4097, 10_000]))
    return st.one_of(st.lists(item, max_size=4), repeated)


def ints(bits: int, signed: bool) -> st.SearchStrategy[int]:
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    return st.one_of(st.sampled_from([0, 1, 2, hi, lo] + ([-1] if signed else [])),
                     st.integers(lo, hi))


FLOATS = st.one_of(st.sampled_from([0.0, 0.5, 1.0, -1.0, 1e30, float("nan"), float("inf")]),
                   st.floats(width=32))
STAGES = [("routing", "router"), ("routing", "handler"), ("react", "retrieve"), ("hci", "offer"),
          ("routing", ""), ("", "router"), ("nope", "x")]


# --- Call ----------------------------------------------------------------------------------------

def _sampling(draw: st.DrawFn) -> common_pb2.SamplingParams:
    s = common_pb2.SamplingParams(max_tokens=draw(st.sampled_from([1, 4, 16]) | ints(32, True)))
    for name, values in (("temperature", FLOATS), ("top_p", FLOATS), ("top_k", ints(32, True)),
                         ("seed", ints(64, False)), ("ignore_eos", st.booleans())):
        if draw(st.integers(0, 5)) == 0:
            setattr(s, name, draw(values))
    if draw(st.integers(0, 5)) == 0:
        s.stop.extend(draw(many(text("\n", "stop"), small_text("\n", "stop"))))
    return s


#: How each demand field is made hostile.
HOSTILE: dict[str, Callable[[st.DrawFn, common_pb2.StageDemand], None]] = {
    "model": lambda draw, d: setattr(d, "model", draw(text(MODEL))),
    "prompt": lambda draw, d: setattr(d, "prompt", draw(text("hello"))),
    "sampling": lambda draw, d: d.sampling.CopyFrom(_sampling(draw)),
    "stage": lambda draw, d: (setattr(d, "template_id", draw(text("routing"))),
                              setattr(d, "stage_id", draw(text("router")))),
    "stage_version": lambda draw, d: setattr(d, "stage_version", draw(ints(32, False))),
    "ids": lambda draw, d: (setattr(d, "workflow_id", draw(text("wf-1"))),
                            setattr(d, "agent_id", draw(text("a"))),
                            setattr(d, "workflow_type", draw(text("routing")))),
    "request_id": lambda draw, d: setattr(d.header, "id", draw(text("r1"))),
    "inputs": lambda draw, d: d.inputs.update(draw(st.dictionaries(
        text("query", "function"), text("q"), max_size=3) | st.builds(
        lambda n: {f"k{i}": "v" for i in range(n)}, st.sampled_from([256, 257, 5000])))),
    "outputs": lambda draw, d: d.outputs.update(draw(st.dictionaries(
        text("router", "handler"), text("out"), max_size=3))),
    "offered": lambda draw, d: d.offered.extend(draw(many(text("Le Coq"), small_text("x")))),
    "observation": lambda draw, d: setattr(d, "observation", draw(text("seen"))),
}


@st.composite
def call_requests(draw: st.DrawFn) -> gateway_pb2.CallRequest:
    """A valid call (a plain one or a template stage's) with up to three fields made hostile."""
    request = call_request(sampling=common_pb2.SamplingParams(max_tokens=draw(
        st.sampled_from([1, 8, 64]))))
    template_id, stage_id = draw(st.sampled_from([("", ""), *STAGES]))
    request.demand.template_id, request.demand.stage_id = template_id, stage_id
    for name in draw(st.lists(st.sampled_from(sorted(HOSTILE)), max_size=3, unique=True)):
        HOSTILE[name](draw, request.demand)
    return request


# --- WriteRecords ----------------------------------------------------------------------------

def _documents() -> st.SearchStrategy[gateway_pb2.Document]:
    words = st.builds(lambda n: " ".join(f"w{i}" for i in range(n)),
                      st.sampled_from([3, 50, 4_000, 5_000]))  # 4,000: a write of 4,002 records
    return st.builds(gateway_pb2.Document, doc_id=text("doc-1"), title=text("Title"),
                     text=st.one_of(text("some words"), small_text("a b"), words))


@st.composite
def gateway_writes(draw: st.DrawFn) -> gateway_pb2.GatewayWriteRequest:
    """Record ids, corpus removals and upserts: each absent, a few, or a huge list."""
    request = gateway_pb2.GatewayWriteRequest()
    if draw(st.booleans()):
        request.record_ids.extend(draw(many(text("crm/cust-1"), small_text("crm/cust-1"))))
    if draw(st.integers(0, 3)) == 0:
        request.removals.extend(draw(many(text("doc-1"), small_text("doc-1"))))
    if draw(st.integers(0, 2)) == 0:
        request.upserts.extend(draw(st.lists(_documents(), max_size=3)))
    return request


@st.composite
def csl_writes(draw: st.DrawFn) -> csl_pb2.WriteRecordsRequest:
    """A csl write: tenant, record ids with floors, a writer's version (each maybe hostile)."""
    floors = st.sampled_from([0, 0, 7]) | ints(64, False)
    writes = draw(many(st.builds(csl_pb2.RecordWrite, record_id=text("r1"), floor=floors),
                       st.builds(csl_pb2.RecordWrite, record_id=small_text("r1"), floor=floors)))
    return csl_pb2.WriteRecordsRequest(tenant=draw(st.sampled_from(["", "acme"]) | text()),
                                       writes=writes, version=draw(
                                           st.sampled_from([0, 0, 0]) | ints(64, False)))


# --- RegisterTemplate --------------------------------------------------------------------------

def _template(tid: str, stages: int = 3) -> dict[str, Any]:
    def llm(i: int) -> dict[str, Any]:
        return {"id": f"s{i}", "kind": "llm", "prompt": f"step {i} {{{{q}}}}",
                "sampling": {"max_tokens": 8}, "bind": {"q": "input.q"}}
    return {"id": tid, "version": 1, "model": MODEL,
            "stages": [llm(i) for i in range(stages)],
            "decisions": [{"stage": "s0", "space": "bounded", "candidates": ["a", "b"],
                           "semantics": "exclusive", "subgraph": ["s1"]}]}


YAML_SCALARS = st.one_of(st.none(), st.booleans(), ints(64, True), FLOATS, text("x"),
                         st.just([]), st.just({}), st.just([[[[["deep"]]]]]))
#: Where a hostile value goes in a valid template document.
PLACES: list[Callable[[dict[str, Any], Any], None]] = [
    lambda d, v: d.update(id=v), lambda d, v: d.update(version=v),
    lambda d, v: d.update(stages=v), lambda d, v: d["stages"][0].update(prompt=v),
    lambda d, v: d["stages"][0].update(kind=v), lambda d, v: d["stages"][1].update(bind=v),
    lambda d, v: d["stages"][0]["sampling"].update(max_tokens=v),
    lambda d, v: d["stages"][0]["sampling"].update(stop=v),
    lambda d, v: d["decisions"][0].update(candidates=v),
    lambda d, v: d["decisions"][0].update(subgraph=v), lambda d, v: d.update(decisions=v),
    lambda d, v: d.update(extra=v),
]


def _nested(depth: int, style: str) -> str:
    if style == "flow":
        return "description: " + "[" * depth + "]" * depth + "\n"
    if style == "map":
        return "description: " + "{a: " * depth + "1" + "}" * depth + "\n"
    return "".join("  " * i + f"k{i}:\n" for i in range(depth)) + "  " * depth + "x\n"


YAML_TOKENS = ["- ", ": ", "[", "]", "{", "}", "&a ", "*a ", "!!python/object:os.system ",
               "? ", "|\n", ">\n", "\n", "  ", "'", '"', "%YAML 1.1\n", "---\n", "...\n",
               "id", "t", "1e400", "0x10", "~", "!!binary ", "<<: ", "stages", "\t", "\\u0000"]


@st.composite
def template_texts(draw: st.DrawFn) -> str:
    """Valid templates, templates with one value made hostile, nesting around the depth limit
    and far past it, oversized documents, too many nodes, alias chains and YAML-shaped
    garbage."""
    kind = draw(st.sampled_from(["valid", "hostile", "hostile", "deep", "huge", "garbage"]))
    tid = draw(st.from_regex(r"[a-z][a-z0-9_.-]{0,8}", fullmatch=True))
    if kind == "valid":
        return yaml.safe_dump(_template(tid, draw(st.sampled_from([2, 3, 256, 257]))))
    if kind == "hostile":
        document = _template(tid)
        draw(st.sampled_from(PLACES))(document, draw(YAML_SCALARS))
        return yaml.safe_dump(document)
    if kind == "deep":
        depth = draw(st.sampled_from([MAX_TEMPLATE_DEPTH - 2, MAX_TEMPLATE_DEPTH - 1,
                                      MAX_TEMPLATE_DEPTH, 200, 3_000, 60_000]))
        style = draw(st.sampled_from(["flow", "map", "block"]))
        return _nested(min(depth, 300) if style == "block" else depth, style)
    if kind == "huge":
        return draw(st.sampled_from([
            "description: " + "x" * MAX_TEMPLATE_BYTES,
            "a: &a [" + ",".join(["x"] * 9) + "]\n" + "".join(
                f"{c}: &{c} [{','.join(['*' + p] * 9)}]\n"
                for p, c in zip("abcdefgh", "bcdefghi", strict=True)),
            "x: " + "é" * (MAX_TEMPLATE_BYTES // 2 + 1),
            "description:\n" + "- a\n" * 60_000]))  # past the node limit, within the bytes
    return draw(st.lists(st.sampled_from(YAML_TOKENS), max_size=60).map("".join) | text())


# --- garbage bytes ---------------------------------------------------------------------------

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _tag(field: int, wire_type: int) -> bytes:
    return _varint(field << 3 | wire_type)


CRAFTED = [
    _tag(1, 2) + _varint(1_000_000) + b"short",  # a length past the end
    _tag(1, 0) + b"\xff" * 10 + b"\x7f",  # an over-long varint
    _tag(1, 2) + _varint(3) + b"\xff\xfe\xfd",  # not UTF-8 where a string (or message) goes
    _tag(3, 2) + _varint(2) + b"\xc3\x28",  # invalid UTF-8 in repeated strings (record_ids)
    _tag(99, 3) * 200 + _tag(99, 4) * 200,  # groups nested 200 deep in an unknown field
    _tag(1, 5) + b"\x00\x00",  # a truncated fixed32
    _tag(0, 0) + b"\x00",  # field number 0
    _tag(2**29 - 1, 1) + b"\x00" * 8,  # the largest field number
    _tag(1, 7) + b"\x00",  # wire type 7 does not exist
]


@st.composite
def garbage(draw: st.DrawFn) -> tuple[str, bytes]:
    """A method and bytes that are no request of it: random, crafted, or a valid request
    truncated, bit-flipped or followed by junk."""
    method = draw(st.sampled_from(sorted(RESPONSES)))
    valid = {CALL: call_request(), GW_WRITE: gateway_pb2.GatewayWriteRequest(record_ids=["r"]),
             TEMPLATE: gateway_pb2.RegisterTemplateRequest(yaml=yaml.safe_dump(_template("g"))),
             CSL_WRITE: csl_pb2.WriteRecordsRequest(writes=[csl_pb2.RecordWrite(record_id="r")])
             }[method].SerializeToString()
    kind = draw(st.sampled_from(["random", "crafted", "cut", "flip", "junk"]))
    if kind == "random":
        return method, draw(st.binary(max_size=300))
    if kind == "crafted":
        return method, draw(st.sampled_from(CRAFTED))
    if kind == "cut":
        return method, valid[:draw(st.integers(0, len(valid)))]
    if kind == "flip":
        i = draw(st.integers(0, len(valid) - 1))
        return method, valid[:i] + bytes([valid[i] ^ draw(st.integers(1, 255))]) + valid[i + 1:]
    return method, valid + draw(st.binary(min_size=1, max_size=40))


# --- the runs ----------------------------------------------------------------------------------

def fuzz(cases: int) -> settings:
    return settings(max_examples=max(cases, 1), deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


def run_call(channels: dict[str, grpc.Channel], cases: int) -> None:
    strategy = st.one_of(call_requests(), call_requests(),
                         messages(gateway_pb2.CallRequest.DESCRIPTOR, gateway_pb2.CallRequest))

    @fuzz(cases)
    @given(strategy)
    def check(request: gateway_pb2.CallRequest) -> None:
        answer(channels, CALL, request)
    check()


def run_gateway_write(channels: dict[str, grpc.Channel], cases: int) -> None:
    @fuzz(cases)
    @given(gateway_writes())
    def check(request: gateway_pb2.GatewayWriteRequest) -> None:
        code, details = answer(channels, GW_WRITE, request)
        assert code != grpc.StatusCode.UNAVAILABLE, details  # the mesh is up: a bad write
    check()


def run_csl_write(channels: dict[str, grpc.Channel], cases: int) -> None:
    @fuzz(cases)
    @given(csl_writes())
    def check(request: csl_pb2.WriteRecordsRequest) -> None:
        answer(channels, CSL_WRITE, request)
    check()


def run_template(channels: dict[str, grpc.Channel], cases: int) -> None:
    @fuzz(cases)
    @given(template_texts())
    def check(text: str) -> None:
        answer(channels, TEMPLATE, gateway_pb2.RegisterTemplateRequest(yaml=text))
    check()


def run_raw(channels: dict[str, grpc.Channel], cases: int) -> None:
    @fuzz(cases)
    @given(garbage())
    def check(target: tuple[str, bytes]) -> None:
        answer(channels, *target)
    check()


RUNS: dict[str, Callable[[dict[str, grpc.Channel], int], None]] = {
    "call": run_call, "gateway_write": run_gateway_write, "csl_write": run_csl_write,
    "template": run_template, "raw": run_raw}


@pytest.mark.parametrize("target", sorted(RUNS))
def test_fuzzed_requests_get_a_clean_bounded_timely_status(
        channels: dict[str, grpc.Channel], target: str) -> None:
    RUNS[target](channels, round(DEFAULT_CASES * SHARES[target]))
    assert_still_serving(channels)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # 10,000 inputs take about 6 minutes on a busy 2-core machine
@pytest.mark.skipif(not CAMPAIGN_CASES, reason="set DYNBRANCH_FUZZ_CASES=N (or "
                    "DYNBRANCH_FUZZ=full for 10,000) to run the campaign")
def test_fuzz_campaign(channels: dict[str, grpc.Channel]) -> None:
    before = sum(CALLS.values())
    for target, run in RUNS.items():
        run(channels, round(CAMPAIGN_CASES * SHARES[target]))
        assert_still_serving(channels)
    made = sum(CALLS.values()) - before
    print(f"\ngRPC fuzz campaign: {made} fuzzed calls, {dict(CALLS)}")
    assert made >= CAMPAIGN_CASES
