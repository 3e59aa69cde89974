"""The tagging interceptor (``services.gateway.tagging``): tags from a context that nests and
follows asyncio tasks, put on the wire by ``httpx`` hooks and transports, with the official
``openai`` and ``anthropic`` clients and with LangGraph (``LangGraphTagger``).

What goes on the wire is read by a small local HTTP server (starlette under uvicorn, in its own
thread, so sync clients can call it too) that records each request's headers and answers in
the shape each client parses. That the gateway acts on the headers is
``tests/e2e/test_agent_frameworks.py``'s part."""

from __future__ import annotations

import asyncio
import operator
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, TypedDict

import httpx
import openai
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from services.gateway.http.front import HEADER_STAGE, TAG_HEADERS
from services.gateway.tagging import (
    AsyncTaggingTransport,
    TaggingTransport,
    Tags,
    async_tagging_client,
    atag_request,
    current_tags,
    tag_request,
    tagged,
    tagging_client,
)
from services.gateway.tagging.context import HEADERS

WF_TYPE, WF_ID, AGENT, STAGE = (
    "x-dynbranch-workflow-type", "x-dynbranch-workflow-id", "x-dynbranch-agent-id",
    "x-dynbranch-stage")


class Recorder:
    """A local HTTP server that records every request's ``x-dynbranch-*`` headers."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.lock = threading.Lock()
        self.app = Starlette(routes=[
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/messages", self.messages, methods=["POST"]),
            Route("/echo", self.echo, methods=["GET", "POST"]),
        ])
        self.url = ""

    def _record(self, request: Request) -> None:
        tags = {k: v for k, v in request.headers.items() if k.startswith("x-dynbranch-")}
        with self.lock:
            self.seen.append((request.url.path, tags))

    def take(self) -> list[dict[str, str]]:
        with self.lock:
            seen, self.seen = self.seen, []
        return [tags for _, tags in seen]

    async def echo(self, request: Request) -> JSONResponse:
        self._record(request)
        return JSONResponse({})

    async def chat(self, request: Request) -> JSONResponse:
        self._record(request)
        body = await request.json()
        return JSONResponse({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0,
            "model": body["model"], "choices": [{
                "index": 0, "finish_reason": "stop",
                "message": {"role": "assistant", "content": "get_weather"}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    async def messages(self, request: Request) -> JSONResponse:
        self._record(request)
        body = await request.json()
        return JSONResponse({
            "id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
            "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}})


@pytest.fixture(scope="module")
def server() -> Iterator[Recorder]:
    recorder = Recorder()
    sock = socket.create_server(("127.0.0.1", 0))
    recorder.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    uv = uvicorn.Server(uvicorn.Config(recorder.app, lifespan="off", log_level="warning",
                                       access_log=False, ws="none"))
    thread = threading.Thread(target=lambda: asyncio.run(uv.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert uv.started
    yield recorder
    uv.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def recorder(server: Recorder) -> Recorder:
    server.take()
    return server


# -- the context ------------------------------------------------------------------------------


def test_the_header_names_are_the_ones_the_front_reads() -> None:
    assert {HEADERS[f] for f in ("workflow_type", "workflow_id", "agent_id")} == set(TAG_HEADERS)
    assert {HEADERS[f] for f in TAG_HEADERS.values()} == set(TAG_HEADERS)
    assert HEADERS["stage"] == HEADER_STAGE


def test_blocks_nest_inherit_clear_and_restore() -> None:
    assert current_tags() == Tags() and current_tags().headers() == {}
    with tagged(workflow_type="routing", workflow_id="wf-1") as outer:
        assert outer == current_tags() == Tags("routing", "wf-1")
        with tagged(stage="routing/router", agent_id=" a1 ") as inner:
            assert inner == Tags("routing", "wf-1", "a1", "routing/router")
            with tagged(workflow_id="wf-2", stage=""):
                assert current_tags().headers() == {WF_TYPE: "routing", WF_ID: "wf-2",
                                                    AGENT: "a1"}
            assert current_tags() is inner
        assert current_tags() is outer
    assert current_tags() == Tags()


def test_bad_tags_are_refused_before_any_request() -> None:
    for kwargs, match in (({"stage": "router"}, "template_id/stage_id"),
                          ({"workflow_id": "x" * 257}, "at most 256"),
                          ({"agent_id": "a\r\nx-evil: 1"}, "printable ASCII"),
                          ({"workflow_id": "wf-é"}, "printable ASCII")):
        with pytest.raises(ValueError, match=match), tagged(**kwargs):
            pass
    assert current_tags() == Tags()


async def test_tags_follow_asyncio_tasks_and_concurrent_tasks_keep_their_own() -> None:
    async def tagged_as(wf: str, pause: float) -> list[str]:
        seen = []
        with tagged(workflow_id=wf):
            for _ in range(3):
                await asyncio.sleep(pause)
                seen.append(current_tags().workflow_id)
        seen.append(current_tags().workflow_id)
        return seen

    with tagged(workflow_type="react"):
        a, b = await asyncio.gather(tagged_as("a", 0.003), tagged_as("b", 0.002))
        late = asyncio.create_task(_tags_later())
    assert (a, b) == (["a", "a", "a", ""], ["b", "b", "b", ""])
    assert await late == Tags(workflow_type="react")  # the task kept the block's tags
    assert current_tags() == Tags()


async def _tags_later() -> Tags:
    await asyncio.sleep(0.01)
    return current_tags()


# -- httpx ------------------------------------------------------------------------------------


def test_sync_hook_transport_and_client_send_the_tags_but_keep_the_callers(
        recorder: Recorder) -> None:
    clients = [httpx.Client(event_hooks={"request": [tag_request]}),
               httpx.Client(transport=TaggingTransport()),
               tagging_client(headers={AGENT: "caller"})]
    for client in clients:
        with client:
            client.get(f"{recorder.url}/echo")  # no tags: no headers
            with tagged(workflow_type="routing", workflow_id="wf-s", agent_id="ctx"):
                client.get(f"{recorder.url}/echo", headers={WF_ID: "explicit"})
                client.post(f"{recorder.url}/echo", json={})
    plain = {WF_TYPE: "routing", WF_ID: "wf-s", AGENT: "ctx"}
    seen = recorder.take()
    assert seen[:3] == [{}, {**plain, WF_ID: "explicit"}, plain]
    assert seen[3:6] == seen[:3]
    assert seen[6:] == [{AGENT: "caller"}, {**plain, WF_ID: "explicit", AGENT: "caller"},
                        {**plain, AGENT: "caller"}]


async def test_async_hook_transport_and_client_tag_each_task_with_its_own(
        recorder: Recorder) -> None:
    seen_hooks: list[str] = []

    async def own_hook(request: httpx.Request) -> None:  # the caller's hooks still run, after
        seen_hooks.append(request.headers.get(WF_ID, ""))

    clients = [httpx.AsyncClient(event_hooks={"request": [atag_request]}),
               httpx.AsyncClient(transport=AsyncTaggingTransport()),
               async_tagging_client(event_hooks={"request": [own_hook]})]

    async def one(client: httpx.AsyncClient, wf: str) -> None:
        with tagged(workflow_id=wf, stage="react/think"):
            await asyncio.sleep(0)
            await client.get(f"{recorder.url}/echo")

    for client in clients:
        async with client:
            await asyncio.gather(*(one(client, f"wf-{i}") for i in range(4)))
    seen = recorder.take()
    assert sorted(s[WF_ID] for s in seen) == sorted([f"wf-{i}" for i in range(4)] * 3)
    assert all(s == {WF_ID: s[WF_ID], STAGE: "react/think"} for s in seen)
    assert sorted(seen_hooks) == [f"wf-{i}" for i in range(4)]


# -- the official clients ---------------------------------------------------------------------


async def test_openai_clients_send_the_tags_and_keep_default_and_extra_headers(
        recorder: Recorder) -> None:
    ask = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    sync = openai.OpenAI(base_url=f"{recorder.url}/v1", api_key="k", max_retries=0,
                         http_client=tagging_client())
    aio = openai.AsyncOpenAI(base_url=f"{recorder.url}/v1", api_key="k", max_retries=0,
                             default_headers={AGENT: "default"},
                             http_client=openai.DefaultAsyncHttpxClient(
                                 event_hooks={"request": [atag_request]}))
    with sync, tagged(workflow_type="routing", workflow_id="wf-o", stage="routing/router"):
        reply = sync.chat.completions.create(**ask)
        sync.chat.completions.create(**ask, extra_headers={STAGE: "routing/handler"})
    async with aio:
        with tagged(workflow_id="wf-a", agent_id="ctx"):
            await aio.chat.completions.create(**ask)
        await aio.chat.completions.create(**ask)
    assert reply.choices[0].message.content == "get_weather"
    tags = {WF_TYPE: "routing", WF_ID: "wf-o"}
    assert recorder.take() == [{**tags, STAGE: "routing/router"},
                               {**tags, STAGE: "routing/handler"},
                               {WF_ID: "wf-a", AGENT: "default"}, {AGENT: "default"}]


async def test_anthropic_clients_send_the_tags(recorder: Recorder) -> None:
    anthropic = pytest.importorskip("anthropic")
    ask: dict[str, Any] = {"model": "claude", "max_tokens": 8,
                           "messages": [{"role": "user", "content": "hi"}]}
    httpx2 = pytest.importorskip("httpx2")  # anthropic 2.x takes only httpx2 clients
    sync = anthropic.Anthropic(base_url=recorder.url, api_key="k", max_retries=0,
                               http_client=tagging_client(anthropic.DefaultHttpxClient))
    aio = anthropic.AsyncAnthropic(base_url=recorder.url, api_key="k", max_retries=0,
                                   http_client=httpx2.AsyncClient(transport=AsyncTaggingTransport(
                                       httpx2.AsyncHTTPTransport())))
    with sync, tagged(workflow_type="react", workflow_id="wf-c", stage="react/think"):
        reply = sync.messages.create(**ask)
        sync.messages.create(**ask, extra_headers={WF_ID: "explicit"})
    async with aio:
        with tagged(workflow_id="wf-d"):
            first, _ = await asyncio.gather(aio.messages.create(**ask),
                                            _untagged(aio.messages.create(**ask)))
    assert reply.content[0].text == "ok" and first.content[0].text == "ok"
    tags = {WF_TYPE: "react", WF_ID: "wf-c", STAGE: "react/think"}
    seen = recorder.take()
    assert seen[:2] == [tags, {**tags, WF_ID: "explicit"}]
    assert sorted(seen[2:], key=len) == [{}, {WF_ID: "wf-d"}]


async def _untagged(call: Any) -> Any:
    with tagged(workflow_id=""):
        return await call


# -- LangGraph --------------------------------------------------------------------------------


class RouteState(TypedDict):
    messages: list[Any]
    chosen: Annotated[list[str], operator.add]  # parallel handlers both write it


def _graph(model: Any, parallel: bool = False) -> Any:
    """router -(conditional edge)-> weather | flight -> END; with ``parallel``, both handlers
    run after the router, side by side. The nodes know nothing of tags."""
    from langgraph.graph import END, START, StateGraph

    async def router(state: RouteState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    async def weather(state: RouteState) -> dict[str, Any]:
        await model.ainvoke("weather?")
        return {"chosen": ["weather"]}

    async def flight(state: RouteState) -> dict[str, Any]:
        await model.ainvoke("flight?")
        return {"chosen": ["flight"]}

    def pick(state: RouteState) -> str | list[str]:
        if parallel:
            return ["weather", "flight"]
        return "weather" if state["messages"][-1].content == "get_weather" else "flight"

    graph = StateGraph(RouteState)
    graph.add_node("router", router)
    graph.add_node("weather", weather)
    graph.add_node("flight", flight)
    graph.add_edge(START, "router")
    graph.add_conditional_edges("router", pick, ["weather", "flight"])
    graph.add_edge("weather", END)
    graph.add_edge("flight", END)
    return graph.compile()


def _chat(recorder: Recorder, **kw: Any) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model="m", base_url=f"{recorder.url}/v1", api_key="unused",
                      max_retries=0, http_async_client=async_tagging_client(),
                      http_client=tagging_client(), **kw)


async def test_langgraph_nodes_are_tagged_by_thread_and_node(recorder: Recorder) -> None:
    from services.gateway.tagging.langgraph import LangGraphTagger

    graph = _graph(_chat(recorder))
    stages = {"router": "routing/router", "weather": "routing/handler"}
    out = await graph.ainvoke({"messages": [("user", "q")], "chosen": []},
                              {"callbacks": [LangGraphTagger("routing", stages=stages)],
                               "configurable": {"thread_id": "thread-7"}})
    assert out["chosen"] == ["weather"]
    tags = {WF_TYPE: "routing", WF_ID: "thread-7"}
    assert recorder.take() == [{**tags, STAGE: "routing/router"},
                               {**tags, STAGE: "routing/handler"}]
    assert current_tags() == Tags()


async def test_without_a_thread_each_run_is_its_own_workflow_and_parallel_nodes_their_stage(
        recorder: Recorder) -> None:
    from services.gateway.tagging.langgraph import LangGraphTagger

    graph = _graph(_chat(recorder), parallel=True)
    tagger = LangGraphTagger()  # the type from the enclosing block; stage = type/node
    with tagged(workflow_type="routing", agent_id="a-1"):
        for _ in range(2):
            await graph.ainvoke({"messages": [("user", "q")], "chosen": []},
                                {"callbacks": [tagger]})
    seen = recorder.take()
    assert len(seen) == 6
    runs = [seen[:3], seen[3:]]
    for run in runs:
        assert {s[WF_ID] for s in run} == {run[0][WF_ID]}
        uuid.UUID(run[0][WF_ID])  # the graph run's id
        assert run[0][STAGE] == "routing/router"
        assert sorted(s[STAGE] for s in run[1:]) == ["routing/flight", "routing/weather"]
        assert all(s[WF_TYPE] == "routing" and s[AGENT] == "a-1" for s in run)
    assert runs[0][0][WF_ID] != runs[1][0][WF_ID]
    assert tagger.open_runs == 0  # every run it saw is let go


def test_a_sync_graph_is_tagged_too(recorder: Recorder) -> None:
    from langgraph.graph import END, START, StateGraph

    from services.gateway.tagging.langgraph import LangGraphTagger

    model = _chat(recorder)

    def think(state: RouteState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(RouteState)
    graph.add_node("think", think)
    graph.add_edge(START, "think")
    graph.add_edge("think", END)
    graph.compile().invoke({"messages": [("user", "q")], "chosen": []},
                           {"callbacks": [LangGraphTagger("react", workflow_id="wf-sync")],
                            "configurable": {"thread_id": "ignored"}})
    assert recorder.take() == [{WF_TYPE: "react", WF_ID: "wf-sync", STAGE: "react/think"}]


async def test_a_stage_that_is_no_template_stage_fails_the_node(recorder: Recorder) -> None:
    from services.gateway.tagging.langgraph import LangGraphTagger

    graph = _graph(_chat(recorder))
    with pytest.raises(ValueError, match="template_id/stage_id"):
        await graph.ainvoke({"messages": [("user", "q")], "chosen": []},
                            {"callbacks": [LangGraphTagger(stages=lambda node: node)]})
    assert recorder.take() == []


async def test_what_a_block_sets_wins_over_what_the_graph_derives(recorder: Recorder) -> None:
    from langgraph.graph import END, START, StateGraph

    from services.gateway.tagging.langgraph import LangGraphTagger

    model = _chat(recorder)

    async def think(state: RouteState) -> dict[str, Any]:
        await model.ainvoke("derived")
        with tagged(stage="react/act"):
            await model.ainvoke("explicit")
        return {}

    graph = StateGraph(RouteState)
    graph.add_node("think", think)
    graph.add_edge(START, "think")
    graph.add_edge("think", END)
    with tagged(workflow_id="wf-outer"):
        await graph.compile().ainvoke({"messages": [], "chosen": []},
                                      {"callbacks": [LangGraphTagger("react")],
                                       "configurable": {"thread_id": "thread-1"}})
    tags = {WF_TYPE: "react", WF_ID: "wf-outer"}
    assert recorder.take() == [{**tags, STAGE: "react/think"}, {**tags, STAGE: "react/act"}]
