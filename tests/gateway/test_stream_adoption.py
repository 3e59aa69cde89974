"""A streamed handler call on each chat-shaped HTTP protocol (OpenAI chat completions, the
Responses API, Anthropic's Messages API) adopts the speculative fill still running for it, as
users run it: a copy of the built-in ``routing`` template whose handler stage is in chat form
(``chat: true`` with a system turn) registered through the SDK, a tagged router call that opens
the branch (its ``max_tokens`` small, so the fill outlasts it), then the handler call on the
protocol under test carrying exactly the stage's turns (system, user) and sampling. The stream
says ``promoted_fill``, carries the name the SDK renders for the fill, gets the fill's text so
far at once and the rest as decoded, and its text is the fill's output (the same call repeated
whole, which the library then answers). A conversation other than the stage's turns names
another demand: the engine serves it, and nothing is adopted.

One in-process mesh (csl, a sim engine at time scale 0.1, a gateway with its HTTP front on port
0) serves the module; each test routes fresh inputs whose handler decodes its whole cap (256
tokens, ~0.5 s here), so neither the library nor another test's fill answers it."""

from __future__ import annotations

import asyncio
import gc
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
import pytest_asyncio
import yaml

from services.common.values.reuse_name import StageFingerprint, reuse_name
from services.engine_agent.sim.tokenizer import text_key
from services.gateway.auth import LOCAL_TENANT
from services.gateway.templates import Template
from services.gateway.templates.render import (
    render_candidate_stage,
    render_text,
    resolve_bindings,
)
from tests.gateway.mesh import MODEL, Mesh, mesh

pytestmark = pytest.mark.asyncio(loop_scope="module")

TEMPLATE = "routing-chat"
ROUTER, HANDLER = f"{TEMPLATE}/router", f"{TEMPLATE}/handler"
FUNCTIONS = ("get_weather", "book_flight")
CHOSEN = "get_weather"
#: The routing template's handler cap: a handler call asks the same to name the fill's stage.
HANDLER_TOKENS = 256
SYSTEM = "You write function calls as JSON objects, nothing else."
GREEDY = {"temperature": 0}  # newer Anthropic clients send no sampling fields: extra_body


def chat_routing_yaml() -> str:
    """The built-in ``routing`` template under a new id, its handler in chat form."""
    builtin = Path(__file__).parents[2] / "services/gateway/templates/workflows/routing.yaml"
    doc = yaml.safe_load(builtin.read_text())
    doc["id"] = TEMPLATE
    handler = next(s for s in doc["stages"] if s["id"] == "handler")
    handler |= {"chat": True, "system": SYSTEM}
    return yaml.safe_dump(doc, sort_keys=False)


@dataclass(frozen=True, slots=True)
class Served:
    """The module's mesh, the HTTP front's base URL and the registered template."""

    mesh: Mesh
    base: str
    template: Template

    @property
    def adoptions_served(self) -> int:
        """Adopting demands the gateway answered from their fill so far."""
        return self.mesh.branches.counters["adoptions_served"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served() -> AsyncIterator[Served]:
    async with mesh(time_scale=0.1, http_port=0) as m:
        template = await m.client.register_yaml(chat_routing_yaml())
        assert template.stage("handler").chat
        base = f"http://127.0.0.1:{m.gateway.http_port}"
        await warm_up(base)
        yield Served(m, base, template)


async def warm_up(base: str) -> None:
    """One short untagged stream per protocol: the SDKs build their event models on first use
    (the Responses API's ~1 s on this machine), which is no part of the gateway's timing."""
    flow = Flow({}, "Be brief.", "Say hi.", "")
    for stream, _ in PROTOCOLS.values():
        await stream(base, flow, max_tokens=2)


def full_cap_inputs(template: Template, label: str) -> dict[str, str]:
    """Routing inputs for ``label`` whose handler fill decodes its whole cap (the sim's
    greedy EOS is a hash of the prompt: ``sim/engine.py`` ``_pseudo_text``, range 32..512),
    so every protocol's stream lasts as long."""
    functions, (lo, hi) = json.dumps([{"name": f} for f in FUNCTIONS]), (32, 512)
    for attempt in range(1000):
        inputs = {"functions": functions, "query": f"Weather in Oslo? ({label} {attempt})"}
        prompt = render_candidate_stage(template, ROUTER, CHOSEN, "handler", inputs=inputs,
                                        outputs={}).text
        if lo + (text_key(prompt, "greedy") >> 32) % (hi - lo + 1) >= HANDLER_TOKENS:
            return inputs
    raise AssertionError("no inputs whose handler decodes its whole cap")


@dataclass(frozen=True, slots=True)
class Flow:
    """A routed workflow: its tags on the handler call, the handler's turns and the name
    the SDK renders for the handler's fill."""

    handler_tags: dict[str, str]
    system: str
    user: str
    fill_name: str


async def route(s: Served, label: str) -> Flow:
    """The tagged router call on fresh inputs (``max_tokens`` small: the fill outlasts it),
    and the handler's chat turns rendered from the template as a user's harness renders them."""
    inputs, workflow_id = full_cap_inputs(s.template, label), f"wf-{label}"
    tags = {"x-dynbranch-workflow-id": workflow_id}
    async with oai(s.base) as client:
        await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": inputs["query"]}],
            temperature=0, max_tokens=24, extra_headers={**tags, "x-dynbranch-stage": ROUTER},
            extra_body={"dynbranch": {"inputs": inputs, "offered": list(FUNCTIONS)}})
    stage = s.template.stage("handler")
    bindings = resolve_bindings(s.template, ROUTER, CHOSEN, "handler", inputs=inputs,
                                outputs={})
    rendered = s.mesh.client.render(TEMPLATE, "handler", inputs=inputs, candidate=CHOSEN)
    name = reuse_name(LOCAL_TENANT, StageFingerprint(**rendered.fingerprint_fields()),
                      rendered.input)
    return Flow({**tags, "x-dynbranch-stage": HANDLER}, render_text(stage.system, bindings),
                render_text(stage.prompt, bindings), str(name))


# -- the three protocols, streamed and whole ----------------------------------------------------


def oai(base: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)


def claude(base: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=base, api_key="unused", max_retries=0)


@dataclass(frozen=True, slots=True)
class Streamed:
    """A streamed answer as the client saw it: headers, each text delta's arrival (seconds
    after the request was sent) and the stream's end."""

    source: str
    reuse_name: str
    deltas: list[tuple[float, str]]
    total_s: float

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.deltas)

    @property
    def first_s(self) -> float:
        return self.deltas[0][0]


async def stream_chat(base: str, messages: list[dict[str, str]], tags: dict[str, str],
                      max_tokens: int = HANDLER_TOKENS) -> Streamed:
    async with oai(base) as client:
        start = time.perf_counter()
        raw = await client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, temperature=0, max_tokens=max_tokens, stream=True,
            extra_headers=tags)
        deltas = [(time.perf_counter() - start, c.choices[0].delta.content)
                  async for c in raw.parse() if c.choices and c.choices[0].delta.content]
        return Streamed(raw.headers["x-dynbranch-source"], raw.headers["x-dynbranch-reuse-name"],
                        deltas, time.perf_counter() - start)


async def whole_chat(base: str, messages: list[dict[str, str]], tags: dict[str, str]
                     ) -> tuple[str, str]:
    async with oai(base) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, temperature=0, max_tokens=HANDLER_TOKENS,
            extra_headers=tags)
        return raw.headers["x-dynbranch-source"], raw.parse().choices[0].message.content or ""


async def stream_responses(base: str, flow: Flow, max_tokens: int = HANDLER_TOKENS
                           ) -> Streamed:
    async with oai(base) as client:
        start = time.perf_counter()
        raw = await client.responses.with_raw_response.create(
            model=MODEL, instructions=flow.system, input=flow.user, temperature=0,
            max_output_tokens=max_tokens, stream=True, extra_headers=flow.handler_tags)
        deltas = [(time.perf_counter() - start, e.delta) async for e in raw.parse()
                  if e.type == "response.output_text.delta" and e.delta]
        return Streamed(raw.headers["x-dynbranch-source"], raw.headers["x-dynbranch-reuse-name"],
                        deltas, time.perf_counter() - start)


async def whole_responses(base: str, flow: Flow) -> tuple[str, str]:
    async with oai(base) as client:
        raw = await client.responses.with_raw_response.create(
            model=MODEL, instructions=flow.system, input=flow.user, temperature=0,
            max_output_tokens=HANDLER_TOKENS, extra_headers=flow.handler_tags)
        return raw.headers["x-dynbranch-source"], raw.parse().output_text


async def stream_messages(base: str, flow: Flow, max_tokens: int = HANDLER_TOKENS
                          ) -> Streamed:
    async with claude(base) as client:
        start = time.perf_counter()
        async with client.messages.stream(
                model=MODEL, max_tokens=max_tokens, system=flow.system,
                messages=[{"role": "user", "content": flow.user}],
                extra_headers=flow.handler_tags, extra_body=GREEDY) as stream:
            deltas = [(time.perf_counter() - start, text) async for text in stream.text_stream
                      if text]
        headers = stream.response.headers
        return Streamed(headers["x-dynbranch-source"], headers["x-dynbranch-reuse-name"],
                        deltas, time.perf_counter() - start)


async def whole_messages(base: str, flow: Flow) -> tuple[str, str]:
    async with claude(base) as client:
        raw = await client.messages.with_raw_response.create(
            model=MODEL, max_tokens=HANDLER_TOKENS, system=flow.system,
            messages=[{"role": "user", "content": flow.user}],
            extra_headers=flow.handler_tags, extra_body=GREEDY)
        return raw.headers["x-dynbranch-source"], (await raw.parse()).content[0].text


@contextmanager
def gc_paused() -> Iterator[None]:
    """No garbage collection while a stream is timed: the test process holds the mesh and the
    clients, and a full collection of that heap (~0.3 s on a 2-core CI machine, longer in the
    whole suite) would stall server and client alike at a random point of the timing; a stream
    allocates little."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def turns(flow: Flow) -> list[dict[str, str]]:
    return [{"role": "system", "content": flow.system}, {"role": "user", "content": flow.user}]


Call = Callable[..., Awaitable[Any]]  # (base, flow, max_tokens=...)
PROTOCOLS: dict[str, tuple[Call, Call]] = {
    "chat": (lambda base, f, **kw: stream_chat(base, turns(f), f.handler_tags, **kw),
             lambda base, f: whole_chat(base, turns(f), f.handler_tags)),
    "responses": (stream_responses, whole_responses),
    "messages": (stream_messages, whole_messages),
}


# -- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", list(PROTOCOLS))
async def test_a_streamed_chat_handler_adopts_the_running_fill(served: Served, protocol: str
                                                               ) -> None:
    stream, whole = PROTOCOLS[protocol]
    flow = await route(served, f"adopt-{protocol}")
    before = served.adoptions_served
    with gc_paused():
        streamed: Streamed = await stream(served.base, flow)
    adopted = served.adoptions_served - before
    again = await whole(served.base, flow)
    print(f"\n[{protocol}] first text {streamed.first_s * 1e3:.0f} ms of "
          f"{streamed.total_s * 1e3:.0f} ms ({len(streamed.deltas)} deltas)")
    assert streamed.source == "promoted_fill" and adopted == 1
    assert streamed.reuse_name == flow.fill_name  # the turns sent render the fill's prompt
    # The fill's text so far at once, then the rest as it is decoded (not one whole answer).
    assert streamed.first_s < streamed.total_s / 3, (streamed.first_s, streamed.total_s)
    assert len(streamed.deltas) > 2
    assert again == ("library", streamed.text) and streamed.text  # the fill's output, stored


async def test_a_handler_whose_turns_differ_from_the_stages_is_served_by_the_engine(
        served: Served) -> None:
    """An extra system turn renders another prompt, so another name: no fill matches it (and,
    as the branch's first handler demand, it settles the exclusive branch with no winner)."""
    flow = await route(served, "differ")
    messages = [{"role": "system", "content": "Answer in French."}, *turns(flow)]
    before = served.adoptions_served
    # Untagged calls name no template stage, so neither can meet the fill: the engine computes
    # the mismatched conversation's text and the stage's own turns' (what the fill decodes).
    streamed, untagged, stage_turns = await asyncio.gather(
        stream_chat(served.base, messages, flow.handler_tags),
        whole_chat(served.base, messages, {}), whole_chat(served.base, turns(flow), {}))
    adopted = served.adoptions_served - before
    assert streamed.source == "engine" and adopted == 0
    assert streamed.reuse_name != flow.fill_name
    assert untagged == ("engine", streamed.text) and streamed.text
    assert stage_turns[0] == "engine" and stage_turns[1] != streamed.text
