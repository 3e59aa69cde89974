"""Adoption in real time, as users run it: ``dynbranch up`` on its defaults (sim engines at time
scale 1, so a token takes ~18 ms of wall time), a tagged routing flow whose router (a tool call
of ~30 tokens) answers long before the handler's early fill (256 tokens, ~4.6 s) ends, so the
handler call arrives while its fill still runs and adopts it:

- the official ``openai`` SDK with tags in headers: the handler is ``promoted_fill``, the
  gateway counted one adoption served and no refusal, and the handler's latency is below the
  floor's (the same flow with the router untagged, so no fill ran: fresh inputs, the same
  256-token handler) by at least half the router's time, the time the fill ran before it;
- a LangGraph agent tagged by ``LangGraphTagger`` (``examples/langgraph_tagged.py``'s graph);
- the tagging snippet of docs/api.md, run as written (a script reading DYNBRANCH_BASE_URL);
- a streamed handler (``/v1/completions`` with ``stream=True``): the fill's text so far comes at
  once, its first chunk long before the stream ends, and the text equals the whole answer.

The built-in ``routing`` handler is not in chat form, so its prompt travels as a completion;
a chat, Responses or Messages handler adopts a fill of a stage in chat form
(``tests/gateway/test_stream_adoption.py``).

One ``dynbranch up`` process (every service its own process) serves the whole module."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.test_cli import printed, up_lines

pytestmark = pytest.mark.slow
MODEL = "qwen3-32b"
FUNCTIONS = ("get_weather", "book_flight")
TOOLS = [{"type": "function", "function": {
    "name": name, "description": f"{name.replace('_', ' ')}.", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    for name in FUNCTIONS]
#: The routing template's handler ``max_tokens``: a handler call must ask the same to match.
HANDLER_TOKENS = 256
#: Why an adopting demand stops waiting (``speculation/adoption.py``; none is expected here).
REFUSALS = ("stalled", "sooner", "deadline", "fill_failed")
COUNTERS = ("adoptions", "adoptions_served", *(f"promotion_refused_{r}" for r in REFUSALS))
ADOPTED_ONCE = {"adoptions": 1.0, "adoptions_served": 1.0,
                **{f"promotion_refused_{r}": 0.0 for r in REFUSALS}}


@dataclass(frozen=True, slots=True)
class Mesh:
    """What ``dynbranch up`` printed: the OpenAI base URL and the gateway's metrics URL."""

    base_url: str
    metrics_url: str


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """``dynbranch up`` on its defaults (two sim engines, time scale 1)."""
    with up_lines(["--log-level", "WARNING"], tmp_path_factory.mktemp("up")) as lines:
        yield Mesh(printed(lines, r"openai-compatible API: (\S+/v1)"),
                   printed(lines, r"^\s*gateway\s+grpc\s+\S+\s+metrics (\S+)"))


def sdk(mesh: Mesh, **kw: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=mesh.base_url, api_key="unused", max_retries=0, **kw)


async def counters(mesh: Mesh) -> dict[str, float]:
    """The gateway's adoption counters (``dynbranch_gateway_branch_<name>_total``)."""
    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(mesh.metrics_url)).text
    values = dict(line.rsplit(" ", 1) for line in text.splitlines()
                  if line.startswith("dynbranch_gateway_branch_"))
    return {name: float(values[f"dynbranch_gateway_branch_{name}_total"]) for name in COUNTERS}


def counted(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before[name] for name in COUNTERS}


# -- inputs whose handler decodes a few hundred tokens ------------------------------------------


def handler_prompt(inputs: dict[str, str], chosen: str) -> str:
    """The routing template's handler prompt for ``chosen`` (what its fill ran)."""
    from services.gateway.templates import load_builtin
    from services.gateway.templates.render import render_candidate_stage

    return render_candidate_stage(load_builtin("routing"), "routing/router", chosen, "handler",
                                  inputs=inputs, outputs={}).text


def sim_output_tokens(prompt: str) -> int:
    """Tokens the sim engine decodes greedily for ``prompt`` before EOS, at most the handler's
    cap (``sim/engine.py`` ``_pseudo_text``: EOS at ``lo + (key >> 32) % (hi - lo + 1)``,
    default range (32, 512))."""
    from services.engine_agent.sim.tokenizer import text_key

    lo, hi = 32, 512
    return min(lo + (text_key(prompt, "greedy") >> 32) % (hi - lo + 1), HANDLER_TOKENS)


def routing_inputs() -> dict[str, str]:
    """Fresh routing inputs (no library entry answers them) whose every handler decodes the
    whole cap, so handlers of different flows cost the same."""
    while True:
        inputs = {"functions": json.dumps([{"name": name} for name in FUNCTIONS]),
                  "query": f"What is the weather in Oslo? ({uuid.uuid4().hex[:8]})"}
        if all(sim_output_tokens(handler_prompt(inputs, f)) == HANDLER_TOKENS
               for f in FUNCTIONS):
            return inputs


def tags(workflow_id: str, stage: str) -> dict[str, str]:
    return {"x-dynbranch-workflow-id": workflow_id, "x-dynbranch-stage": f"routing/{stage}"}


@dataclass(frozen=True, slots=True)
class Flow:
    """One router → handler flow as the client saw it."""

    router_source: str
    router_s: float
    handler_source: str
    handler_s: float
    handler_tokens: int


async def route(client: openai.AsyncOpenAI, inputs: dict[str, str], workflow_id: str,
                tagged: bool) -> tuple[str, str, float]:
    """The router call (tagged or not): its chosen function, source and latency."""
    extra: dict[str, Any] = ({"extra_headers": tags(workflow_id, "router"),
                              "extra_body": {"dynbranch": {"inputs": inputs}}} if tagged else {})
    start = time.perf_counter()
    raw = await client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": inputs["query"]}], tools=TOOLS,
        tool_choice="required", temperature=0, max_tokens=320, **extra)
    took = time.perf_counter() - start
    chosen = raw.parse().choices[0].message.tool_calls[0].function.name
    return chosen, raw.headers["x-dynbranch-source"], took


async def flow(client: openai.AsyncOpenAI, tagged_router: bool) -> Flow:
    """A routing flow on fresh inputs; the handler call is tagged either way."""
    inputs, workflow_id = routing_inputs(), f"wf-{uuid.uuid4().hex[:8]}"
    chosen, router_source, router_s = await route(client, inputs, workflow_id, tagged_router)
    start = time.perf_counter()
    raw = await client.completions.with_raw_response.create(
        model=MODEL, prompt=handler_prompt(inputs, chosen), temperature=0,
        max_tokens=HANDLER_TOKENS, extra_headers=tags(workflow_id, "handler"))
    handler_s = time.perf_counter() - start
    return Flow(router_source, router_s, raw.headers["x-dynbranch-source"], handler_s,
                raw.parse().usage.completion_tokens)


# -- the tests --------------------------------------------------------------------------------


async def test_tagged_handler_adopts_the_running_fill_and_beats_the_floor(mesh: Mesh) -> None:
    async with sdk(mesh) as client:
        before = await counters(mesh)
        adopted = await flow(client, tagged_router=True)
        after = await counters(mesh)
        floor = await flow(client, tagged_router=False)  # no branch opened: no fill ran
    print(f"\n[adoption] router {adopted.router_s:.3f} s, handler adopted "
          f"{adopted.handler_s:.3f} s vs floor {floor.handler_s:.3f} s "
          f"(saved {floor.handler_s - adopted.handler_s:.3f} s; {adopted.handler_tokens} tokens)")
    assert (adopted.router_source, adopted.handler_source) == ("engine", "promoted_fill")
    assert floor.handler_source == "engine"
    assert adopted.handler_tokens == floor.handler_tokens == HANDLER_TOKENS
    assert counted(before, after) == ADOPTED_ONCE
    # The fill ran while the router decoded: the handler waits only for what is left of it.
    # (Before adoption it waited 1 s and ran anew: the floor plus a second.)
    assert adopted.handler_s < floor.handler_s - adopted.router_s / 2


async def test_langgraph_tagger_handler_adopts_the_running_fill(mesh: Mesh) -> None:
    import openai
    from langchain_core.messages import HumanMessage

    from examples.langgraph_tagged import build
    from services.gateway.tagging import async_tagging_client
    from services.gateway.tagging.langgraph import LangGraphTagger

    inputs = routing_inputs()
    config: Any = {"callbacks": [LangGraphTagger("routing")],
                   "configurable": {"thread_id": f"thread-{uuid.uuid4().hex[:8]}"}}
    async with async_tagging_client(openai.DefaultAsyncHttpxClient, timeout=60) as http:
        graph = build(mesh.base_url, "unused", MODEL, inputs, http)  # as the example's main
        before = await counters(mesh)
        start = time.perf_counter()
        out = await graph.ainvoke({"messages": [HumanMessage(inputs["query"])], "handled": "",
                                   "source": ""}, config)
        took = time.perf_counter() - start
    print(f"\n[langgraph] router + handler {took:.3f} s, handler {out['source']}")
    routed = out["messages"][-1]
    assert routed.response_metadata["headers"]["x-dynbranch-source"] == "engine"
    assert out["handled"] in FUNCTIONS and out["source"] == "promoted_fill"
    assert counted(before, await counters(mesh)) == ADOPTED_ONCE


def docs_snippet() -> str:
    """docs/api.md's tagging snippet: the Python block with the ``tagged(...)`` blocks (a whole
    script; tests/test_docs.py leaves it to this test)."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    return next(b for b in blocks if 'with tagged(workflow_type="routing"' in b)


async def test_docs_tagging_snippet_as_written_adopts_the_running_fill(mesh: Mesh,
                                                                       tmp_path: Path) -> None:
    script = tmp_path / "snippet.py"
    script.write_text(docs_snippet())
    before = await counters(mesh)
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(script), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ, "DYNBRANCH_BASE_URL": mesh.base_url})
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    print(f"\n[docs] the snippet (imports, router, handler) {time.perf_counter() - start:.3f} s")
    assert proc.returncode == 0, err.decode()
    chosen, source = out.decode().split()
    assert chosen in FUNCTIONS and source == "promoted_fill"
    assert counted(before, await counters(mesh)) == ADOPTED_ONCE


async def test_streamed_handler_gets_the_fills_text_at_once_then_as_decoded(mesh: Mesh
                                                                            ) -> None:
    inputs, workflow_id = routing_inputs(), f"wf-{uuid.uuid4().hex[:8]}"
    async with sdk(mesh) as client:
        chosen, _, router_s = await route(client, inputs, workflow_id, tagged=True)
        ask: dict[str, Any] = {"model": MODEL, "prompt": handler_prompt(inputs, chosen),
                               "temperature": 0, "max_tokens": HANDLER_TOKENS,
                               "extra_headers": tags(workflow_id, "handler")}
        before = await counters(mesh)
        start = time.perf_counter()
        raw = await client.completions.with_raw_response.create(
            **ask, stream=True, stream_options={"include_usage": True})
        chunks, first, usage = [], 0.0, None
        async for chunk in raw.parse():
            if chunk.choices and chunk.choices[0].text:
                first = first or time.perf_counter() - start
                chunks.append(chunk.choices[0].text)
            usage = chunk.usage or usage
        total = time.perf_counter() - start
        after = await counters(mesh)
        whole = await client.completions.with_raw_response.create(**ask)
    print(f"\n[stream] router {router_s:.3f} s, first text {first:.3f} s of {total:.3f} s "
          f"({len(chunks)} chunks for {usage.completion_tokens} tokens)")
    assert raw.headers["x-dynbranch-source"] == "promoted_fill"
    assert counted(before, after) == ADOPTED_ONCE
    # The fill's text so far at once (before adoption: a 1 s wait and a run anew, ~1/5 of the
    # stream), in one first chunk, then a chunk per token as decoded (not one whole answer).
    assert first < total / 10
    assert HANDLER_TOKENS / 2 < len(chunks) < usage.completion_tokens == HANDLER_TOKENS
    assert whole.headers["x-dynbranch-source"] == "library"  # the adopted fill, stored
    assert "".join(chunks) == whole.parse().choices[0].text
