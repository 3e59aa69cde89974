"""The harness SDK against in-process engines, csl and gateway: it renders what the gateway
renders for fills, so a correct prediction is served from the promoted fill (DESIGN.md §3)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from services.common.pb import gateway_pb2
from services.common.runtime.convert import sampling_to_proto
from services.csl.config import CslSettings
from services.csl.server import build_runtime as build_csl
from services.engine_agent.client import EngineAgentClient
from services.gateway.sdk import DynbranchClient
from services.gateway.templates.render import (
    render_candidate_stage,
    render_stage,
    resolve_stage_bindings,
)
from tests.factories import engine_agent, gateway, generate_request

SOURCE = gateway_pb2.ResultSource
INPUTS = {"service": "restaurant", "dialogue": "User: find me a table for two",
          "options": "A) Luigi's B) Sushi Go C) Le Coq"}
OFFERED = ["Luigi's", "Sushi Go", "Le Coq"]
ECHO_TEMPLATE = """\
id: echo
version: 1
model: qwen3-32b
stages:
  - id: say
    kind: llm
    prompt: "Say {{word}} twice."
    sampling: {max_tokens: 8, temperature: 0}
    bind: {word: input.word}
"""


@asynccontextmanager
async def hci_mesh(tmp_path: Path) -> AsyncIterator[tuple[Any, Any, DynbranchClient]]:
    """csl, one sim engine, a gateway with early fill on, and an SDK client on it."""
    csl = await build_csl(CslSettings(data_dir=str(tmp_path / "csl"), metrics_port=-1,
                                      grace_s=0.5, sync=False))
    await csl.start()
    try:
        async with engine_agent(engine_id="e0", model="qwen3-32b", preset="qwen3-32b-h200",
                                time_scale=0.02) as eng, \
                gateway([eng.address], csl=csl.address, fill_wait_s=2.0) as gw, \
                DynbranchClient(gw.address) as db:
            db.use_builtin("hci")
            yield gw, eng, db
    finally:
        await csl.shutdown()


async def _offer(db: DynbranchClient, workflow_id: str) -> gateway_pb2.CallResponse:
    return await db.call_stage("hci", "offer", workflow_id=workflow_id, inputs=INPUTS,
                               offered=OFFERED)


async def test_sdk_renders_byte_identical_to_the_gateways_fill_rendering(tmp_path: Path) -> None:
    async with hci_mesh(tmp_path) as (gw, _, db):
        served = gw.core.registry.get("hci")  # the template the gateway renders fills from
        outputs = {"offer": "Which one would you like?"}
        for pick in OFFERED:
            mine = db.render("hci", "fulfil", inputs=INPUTS, outputs=outputs, candidate=pick)
            fill = render_candidate_stage(served, "hci/offer", pick, "fulfil", inputs=INPUTS,
                                          outputs=outputs)
            assert mine == fill and mine.input == fill.input and pick.encode() in mine.input
        offer = db.render("hci", "offer", inputs=INPUTS)
        assert offer == render_stage(served, "offer", resolve_stage_bindings(
            served, "offer", inputs=INPUTS, outputs={}))


async def test_offer_then_pick_is_served_from_the_promoted_fill(tmp_path: Path) -> None:
    async with hci_mesh(tmp_path) as (gw, eng, db):
        offer = await _offer(db, "wf-1")
        await asyncio.sleep(0.3)  # the user thinks; the follow-ups fill meanwhile
        pick = await db.call_stage("hci", "fulfil", workflow_id="wf-1", inputs=INPUTS,
                                   outputs={"offer": offer.text}, candidate="Sushi Go")
        rendered = db.render("hci", "fulfil", inputs=INPUTS, outputs={"offer": offer.text},
                             candidate="Sushi Go")
        direct = EngineAgentClient(eng.address)
        events = [e async for e in direct.generate(generate_request(
            "direct", prompt=rendered.text, model="qwen3-32b",
            sampling=sampling_to_proto(rendered.sampling)), timeout_s=10)]
        await direct.close()
        counters = dict(gw.core.branches.counters)
    assert offer.source == SOURCE.RESULT_SOURCE_ENGINE
    assert pick.source == SOURCE.RESULT_SOURCE_PROMOTED_FILL and pick.engine_id == ""
    assert pick.text == events[-1].finished.text  # speculation changes latency only
    assert counters["opened"] == 1 and counters["fills_consumed"] == 1


async def test_settle_resolves_an_open_branch_once(tmp_path: Path) -> None:
    async with hci_mesh(tmp_path) as (_, _, db):
        await _offer(db, "wf-2")
        assert await db.settle("wf-2", "hci/offer", "Le Coq") == 1
        assert await db.settle("wf-2", "hci/offer", "Le Coq") == 0
        assert await db.settle("wf-other", "hci/offer", "Le Coq") == 0
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await db.settle("wf-2", "hci/nope", "Le Coq")
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


async def test_write_bumps_record_versions(tmp_path: Path) -> None:
    async with hci_mesh(tmp_path) as (_, _, db):
        first = await db.write(record_ids=["crm/cust-1", "crm/cust-2"])
        second = await db.write(record_ids=["crm/cust-1"])
        with pytest.raises(grpc.aio.AioRpcError) as nothing:
            await db.write()
        with pytest.raises(grpc.aio.AioRpcError) as no_corpus:
            await db.write(upserts=[("d1", "title", "text")])
    assert set(first) == {"crm/cust-1", "crm/cust-2"} and min(first.values()) >= 1
    assert set(second) == {"crm/cust-1"}  # versions come from one monotonic sequence
    assert second["crm/cust-1"] > max(first.values())
    assert nothing.value.code() == no_corpus.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_untagged_calls_are_reused_only_when_deterministic(tmp_path: Path) -> None:
    async with hci_mesh(tmp_path) as (_, _, db):
        async def sources(**kw: Any) -> list[int]:
            return [(await db.call("untagged prompt", "qwen3-32b", max_tokens=8, **kw)).source
                    for _ in range(2)]
        assert await sources() == [SOURCE.RESULT_SOURCE_ENGINE, SOURCE.RESULT_SOURCE_LIBRARY]
        assert await sources(temperature=0.8) == [SOURCE.RESULT_SOURCE_ENGINE] * 2
        assert await sources(temperature=0.8, seed=3) == [SOURCE.RESULT_SOURCE_ENGINE,
                                                          SOURCE.RESULT_SOURCE_LIBRARY]


async def test_registered_template_is_rendered_and_served(tmp_path: Path) -> None:
    async with hci_mesh(tmp_path) as (gw, _, db):
        template = await db.register_yaml(ECHO_TEMPLATE)
        replies = [await db.call_stage("echo", "say", workflow_id=f"wf-{i}",
                                       inputs={"word": "hello"}) for i in range(2)]
    assert template.id == "echo" and gw.core.registry.get("echo").version == 1
    assert [r.source for r in replies] == [SOURCE.RESULT_SOURCE_ENGINE,
                                           SOURCE.RESULT_SOURCE_LIBRARY]


async def test_an_independent_pick_stops_unfinished_fills_and_keeps_finished_ones(
        tmp_path: Path) -> None:
    """Figure 1a: at the pick, unfinished fills of the other options are aborted, the picked
    one keeps running, and nothing is discarded (finished shadows live until their TTL)."""
    async with hci_mesh(tmp_path) as (gw, _, db):
        await _offer(db, "wf-3")
        (branch,) = gw.core.branches.branches.values()
        await asyncio.wait_for(branch.ready.wait(), 5)
        fills = dict(branch.fills)
        running = {c for c, f in fills.items() if f.task is not None and not f.task.done()}
        assert len(running - {"Le Coq"}) >= 1  # at least one other option is still filling
        assert await db.settle("wf-3", "hci/offer", "Le Coq") == 1
        await asyncio.sleep(0)
        for candidate in running - {"Le Coq"}:
            assert fills[candidate].task.done(), candidate
        if "Le Coq" in running:
            assert not fills["Le Coq"].task.done()  # the pick keeps filling
        counters = gw.core.branches.counters
        assert counters["fills_aborted"] == len(running - {"Le Coq"})
        assert counters["fills_discarded"] == 0
