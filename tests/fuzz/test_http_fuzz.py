"""The HTTP front, fuzzed: bodies (near-valid requests with every field perturbed, and
arbitrary JSON and bytes) and headers on every endpoint. Every answer is a success or an error
in its protocol's shape (OpenAI's ``{"error": {"message", "type", ...}}``; on the Messages
routes Anthropic's ``{"type": "error", "error": {"type", "message"}}``) with a 4xx status,
never a 5xx crash, never a hang; streams end (``[DONE]``, ``response.completed`` or
``response.incomplete``, ``message_stop``, or an error event).

Hostile values (issue 38) are mixed into the perturbed bodies: nesting past the depth limit,
lone surrogates, integers past every range, non-string roles, tool schemas of the wrong types,
tool results that answer no call; every error message is bounded (at most ~1 KB however large
the input). The listed cases of the issue are also sent one by one, each a 4xx naming its field.

``DYNBRANCH_FUZZ=full`` runs the slow suite's count (2,000 per test, 12,000 in all; see
``test_rpc_fuzz``); the default is 60 per test."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.factories import MODEL
from tests.fuzz.protofuzz import BackgroundMesh

FULL = os.environ.get("DYNBRANCH_FUZZ", "") == "full"
EXAMPLES = 2000 if FULL else 60
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=not FULL,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
TIMEOUT_S = 15.0

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63), st.floats(),
              st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=12)

#: What a hostile client sends: nesting past the depth limit (parsed but refused), a lone
#: surrogate, integers past int32/int64/double, a schema of the wrong types, a non-string role.
HOSTILE = st.sampled_from([
    json.loads("[" * 200 + "]" * 200), "\ud800", "a\udfffb", 2**31, 2**63, 2**64, -(2**63) - 1,
    10**400, {"role": ["user"], "content": "x"}, {"role": 5},
    {"type": "object", "properties": [1, 2], "required": "q"},
    {"type": "function", "function": {"name": "f", "parameters": {"type": 5}}},
    {"role": "tool", "tool_call_id": "nope", "content": "r"},
    {"type": "function_call_output", "call_id": "nope", "output": "r"},
    {"type": "tool_result", "tool_use_id": "nope", "content": "r"}, "m" * 100_000])

WEIRD = st.one_of(json_values, HOSTILE,
                  st.sampled_from([None, "", -1, 0, 2**40, 1e308, "x" * 3000, [], {}, True,
                                   "auto", "none", "required"]))

CHAT: dict[str, Any] = {
    "model": MODEL, "messages": [{"role": "user", "content": "pick a tool"}],
    "max_tokens": 4, "temperature": 0,
    "tools": [{"type": "function", "function": {
        "name": "lookup", "description": "look up",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}},
                       "required": ["q"]}}}],
}
COMPLETION: dict[str, Any] = {"model": MODEL, "prompt": "hello", "max_tokens": 4,
                              "temperature": 0}
RESPONSES: dict[str, Any] = {
    "model": MODEL, "input": [{"role": "user", "content": "pick a tool"},
                              {"type": "function_call", "call_id": "c1", "name": "lookup",
                               "arguments": "{}"},
                              {"type": "function_call_output", "call_id": "c1", "output": "x"}],
    "instructions": "be brief", "max_output_tokens": 4, "temperature": 0,
    "tools": [{"type": "function", "name": "lookup", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}}}],
}
MESSAGES: dict[str, Any] = {
    "model": MODEL, "max_tokens": 4, "system": [{"type": "text", "text": "be brief"}],
    "messages": [{"role": "user", "content": "pick a tool"},
                 {"role": "assistant", "content": [{"type": "tool_use", "id": "t1",
                                                    "name": "lookup", "input": {}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                               "content": "x"}]}],
    "tools": [{"name": "lookup", "input_schema": {"type": "object"}}], "temperature": 0,
}
RESPONSES_KEYS = ["stream", "tool_choice", "parallel_tool_calls", "text", "store",
                  "previous_response_id", "reasoning", "metadata", "top_p", "seed", "include",
                  "truncation", "dynbranch", "input", "instructions"]
#: A count_tokens body: the Messages body less the fields that endpoint refuses.
COUNT = {k: v for k, v in MESSAGES.items() if k not in ("max_tokens", "temperature")}
MESSAGES_KEYS = ["stream", "tool_choice", "stop_sequences", "top_p", "top_k", "metadata",
                 "thinking", "output_config", "system", "messages", "dynbranch", "tools"]
EXTRA_KEYS = ["stream", "n", "tool_choice", "parallel_tool_calls", "response_format", "seed",
              "stop", "top_p", "logprobs", "user", "stream_options", "messages", "prompt",
              "dynbranch", "functions", "max_completion_tokens", "presence_penalty"]


@st.composite
def near_valid(draw: st.DrawFn, base: dict[str, Any], extra: list[str] = EXTRA_KEYS,
               items: str = "messages") -> dict[str, Any]:
    """``base`` with some keys dropped, replaced by weird values, or extra keys added."""
    body = dict(base)
    for key in list(body):
        choice = draw(st.integers(0, 5))
        if choice == 0:
            del body[key]
        elif choice == 1:
            body[key] = draw(WEIRD)
    for key in draw(st.lists(st.sampled_from(extra), max_size=3, unique=True)):
        body[key] = draw(WEIRD)
    if draw(st.booleans()) and isinstance(body.get(items), list):
        body[items] = [*body[items], draw(st.dictionaries(
            st.sampled_from(["role", "content", "tool_calls", "tool_call_id", "name", "type",
                             "call_id", "output", "arguments", "id", "input", "tool_use_id"]),
            WEIRD, max_size=4))]
    return body


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    with BackgroundMesh(Path(tmp_path_factory.mktemp("http-fuzz"))).running() as mesh, \
            httpx.Client(base_url=f"http://127.0.0.1:{mesh.http_port}",
                         timeout=TIMEOUT_S) as c:
        yield c


#: The longest error message a client may get (errors.MAX_CLIENT_MESSAGE and its suffix).
MAX_MESSAGE = 1100


def _check(reply: httpx.Response, anthropic: bool = False) -> None:
    assert reply.status_code < 500, f"{reply.status_code}: {reply.text[:300]}"
    if reply.status_code >= 400:
        body = reply.json()
        assert isinstance(body.get("error"), dict), body
        assert isinstance(body["error"].get("message"), str) and body["error"]["message"]
        assert len(body["error"]["message"]) <= MAX_MESSAGE, body["error"]["message"][:300]
        assert isinstance(body["error"].get("type"), str)
        if anthropic:
            assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body


def _post(client: httpx.Client, path: str, content: bytes,
          headers: dict[str, str] | None = None) -> None:
    with client.stream("POST", path, content=content,
                       headers={"content-type": "application/json", **(headers or {})}) as r:
        r.read()  # a stream must end within the timeout
        if not r.headers.get("content-type", "").startswith("text/event-stream"):
            _check(r, anthropic=path.startswith("/v1/messages"))
        elif path == "/v1/responses":
            _named_events_end(r, {"response.completed", "response.incomplete", "error"})
        elif path == "/v1/messages":
            _named_events_end(r, {"message_stop", "error"})
        else:
            _sse_ends(r)


def _sse_ends(reply: httpx.Response) -> None:
    assert reply.status_code == 200
    lines = [ln for ln in reply.text.splitlines() if ln.startswith("data: ")]
    assert lines and lines[-1] == "data: [DONE]", reply.text[-300:]
    for line in lines[:-1]:
        event = json.loads(line[len("data: "):])
        assert "error" in event or "choices" in event, event


def _named_events_end(reply: httpx.Response, last: set[str]) -> None:
    """A Responses or Messages stream: every event named by its data's type, the last one an
    end (or an error)."""
    assert reply.status_code == 200
    lines = reply.text.splitlines()
    names = [ln[len("event: "):] for ln in lines if ln.startswith("event: ")]
    data = [json.loads(ln[len("data: "):]) for ln in lines if ln.startswith("data: ")]
    assert names and len(names) == len(data), reply.text[-300:]
    assert [d["type"] for d in data] == names and names[-1] in last, reply.text[-300:]


@FUZZ
@given(near_valid(CHAT))
def test_chat_completions_answers_perturbed_bodies_cleanly(client: httpx.Client,
                                                           body: dict[str, Any]) -> None:
    _post(client, "/v1/chat/completions", json.dumps(body).encode())


@FUZZ
@given(near_valid(COMPLETION))
def test_completions_answers_perturbed_bodies_cleanly(client: httpx.Client,
                                                      body: dict[str, Any]) -> None:
    _post(client, "/v1/completions", json.dumps(body).encode())


@FUZZ
@given(near_valid(RESPONSES, RESPONSES_KEYS, "input"))
def test_responses_answers_perturbed_bodies_cleanly(client: httpx.Client,
                                                    body: dict[str, Any]) -> None:
    _post(client, "/v1/responses", json.dumps(body).encode())


@FUZZ
@given(near_valid(MESSAGES, MESSAGES_KEYS))
def test_messages_answers_perturbed_bodies_cleanly(client: httpx.Client,
                                                   body: dict[str, Any]) -> None:
    _post(client, "/v1/messages", json.dumps(body).encode())


@FUZZ
@given(st.sampled_from(["/v1/chat/completions", "/v1/completions", "/v1/responses",
                        "/v1/messages", "/v1/messages/count_tokens"]),
       st.one_of(st.binary(max_size=300), json_values.map(lambda v: json.dumps(v).encode())))
def test_arbitrary_bodies_get_errors_in_their_protocols_shape(client: httpx.Client, path: str,
                                                   raw: bytes) -> None:
    _post(client, path, raw)


HEADER_NAMES = ["authorization", "x-api-key", "anthropic-version", "content-type",
                "x-dynbranch-workflow-id", "x-dynbranch-template", "x-dynbranch-stage",
                "x-dynbranch-decision", "accept", "content-length-ish", "x-request-id"]
header_values = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126),
                        max_size=200)


@FUZZ
@given(st.sampled_from([("POST", "/v1/chat/completions"), ("POST", "/v1/completions"),
                        ("POST", "/v1/responses"), ("POST", "/v1/messages"),
                        ("POST", "/v1/messages/count_tokens"),
                        ("GET", "/v1/models"), ("GET", f"/v1/models/{MODEL}"),
                        ("GET", "/v1/models/none%2F..%2Fx"), ("GET", "/healthz")]),
       st.dictionaries(st.sampled_from(HEADER_NAMES), header_values, max_size=4))
def test_every_endpoint_answers_fuzzed_headers_cleanly(client: httpx.Client, route: tuple,
                                                       headers: dict[str, str]) -> None:
    method, path = route
    bodies = {"/v1/chat/completions": CHAT, "/v1/completions": COMPLETION,
              "/v1/responses": RESPONSES, "/v1/messages": MESSAGES,
              "/v1/messages/count_tokens": COUNT}
    body = json.dumps(bodies.get(path, COMPLETION)).encode()
    headers = {k: v.strip() for k, v in headers.items()}
    if method == "GET":
        _check(client.request(method, path, headers=headers))
    else:
        _post(client, path, body, headers)


def _chat(**fields: Any) -> bytes:
    return json.dumps({**CHAT, **fields}).encode()


#: Every case of issue 38 that was a 500, a 503 or accepted, with the field its 400 must name.
LISTED = [
    ("/v1/chat/completions", b"[" * 1000 + b"]" * 1000, "body"),
    ("/v1/chat/completions", _chat(messages=[{"role": "user", "content": "\ud800"}]),
     "messages[0].content"),
    ("/v1/chat/completions", _chat(top_k=2**31), "top_k"),
    ("/v1/chat/completions", _chat(temperature=10**400), "temperature"),
    ("/v1/responses", json.dumps({**RESPONSES, "input": [{"role": ["user"], "content": "x"}]}
                                 ).encode(), "input[0].role"),
    ("/v1/chat/completions", _chat(tools=[{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": [1, 2]}}}]),
     "tools[0].function.parameters"),
    ("/v1/chat/completions", _chat(tools=[{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "required": "q"}}}]),
     "tools[0].function.parameters"),
    ("/v1/chat/completions", _chat(messages=[{"role": "user", "content": "x"},
                                             {"role": "tool", "tool_call_id": "nope",
                                              "content": "r"}]), "messages[1].tool_call_id"),
    ("/v1/responses", json.dumps({**RESPONSES, "input": [
        {"role": "user", "content": "x"},
        {"type": "function_call_output", "call_id": "nope", "output": "r"}]}).encode(),
     "input[1].call_id"),
    ("/v1/messages", json.dumps({**MESSAGES, "messages": [
        {"role": "user", "content": "x"}, {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope",
                                      "content": "r"}]}]}).encode(),
     "messages[2].content[0].tool_use_id"),
    ("/v1/messages/count_tokens", json.dumps({**COUNT, "tools": [
        {"name": "f", "input_schema": {"type": "object", "properties": {"q": {"type": 5}}}}]}
    ).encode(), "tools[0].input_schema"),
    ("/v1/chat/completions", _chat(model="m" * 100_000), "model"),
]


@pytest.mark.parametrize(("path", "raw", "field"), LISTED,
                         ids=[f"{i}-{case[2]}" for i, case in enumerate(LISTED)])
def test_listed_hostile_cases_are_4xx_naming_the_field(client: httpx.Client, path: str,
                                                       raw: bytes, field: str) -> None:
    reply = client.post(path, content=raw, headers={"content-type": "application/json"})
    assert 400 <= reply.status_code < 500, f"{reply.status_code}: {reply.text[:300]}"
    _check(reply, anthropic=path.startswith("/v1/messages"))
    message = reply.json()["error"]["message"]
    assert message.startswith(f"{field}:") or (field == "model" and "'mmm" in message), message
    # ... and the front still serves a well-formed request afterwards.
    ok = client.post("/v1/completions", json=COMPLETION)
    assert ok.status_code == 200, ok.text[:300]
