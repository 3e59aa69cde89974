"""The drafted predictor: a small model names candidates, time-boxed, its time charged."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import pytest

from services.common.values.errors import Unavailable
from services.common.values.generation import FinishReason, GenerationRequest, Timings, Usage
from services.gateway.ports import Execution
from services.gateway.speculation.draft import DraftPredictor
from services.gateway.speculation.predictors import PredictionContext
from tests.factories import engine_agent, gateway
from tests.gateway.mesh import MODEL


class Engines:
    """An EnginePort that answers every generation with ``text`` after ``delay_s``."""

    def __init__(self, text: str, delay_s: float = 0.0, fail: bool = False) -> None:
        self.text, self.delay_s, self.fail = text, delay_s, fail
        self.requests: list[GenerationRequest] = []

    async def generate(self, request: GenerationRequest, timeout_s: float, prefix_key: str = "",
                       on_delta: object = None) -> Execution:
        self.requests.append(request)
        await asyncio.sleep(self.delay_s)
        if self.fail:
            raise Unavailable("engine down")
        return Execution(self.text, FinishReason.STOP, Usage(10, 0, 5),
                         Timings(0.0, 0.01, 0.02, 0.03), "draft-0")

    def models(self) -> set[str]:
        return {"draft"}

    def max_model_len(self, model: str) -> int:
        return 4096


BOUNDED = PredictionContext(("get_weather", "book_flight", "convert_currency"), "Fly me to Rome")


async def test_draft_lines_name_bounded_candidates_in_order() -> None:
    engines = Engines("1. Book_Flight\n- nonsense\nget_weather\nbook_flight\n")
    predictor = DraftPredictor(engines, "draft")
    ranked = await predictor.arank("routing/router", BOUNDED)
    assert [r.candidate for r in ranked] == ["book_flight", "get_weather"]
    assert ranked[0].probability > ranked[1].probability
    (request,) = engines.requests
    assert request.model == "draft" and request.sampling.temperature == 0.0
    assert "Fly me to Rome" in request.prompt and "- convert_currency" in request.prompt


async def test_open_spaces_resolve_lines_and_exclusions_are_skipped() -> None:
    engines = Engines("Rome\nOslo\nParis\n")
    predictor = DraftPredictor(engines, "draft", resolve=lambda line: [f"{line} (city)"])
    context = PredictionContext((), "hop one", exclude=("Oslo (city)",))
    ranked = await predictor.arank("react/think", context)
    assert [r.candidate for r in ranked] == ["Rome (city)", "Paris (city)"]
    assert await DraftPredictor(engines, "draft").arank("react/think", context) == []


async def test_a_draft_past_its_deadline_or_failing_yields_nothing() -> None:
    slow = DraftPredictor(Engines("book_flight", delay_s=1.0), "draft", deadline_s=0.05)
    assert await slow.arank("routing/router", BOUNDED) == [] and slow.timeouts == 1
    down = DraftPredictor(Engines("", fail=True), "draft")
    assert await down.arank("routing/router", BOUNDED) == [] and down.failures == 1
    with pytest.raises(TypeError, match="arank"):
        slow.rank("routing/router", BOUNDED)


async def test_the_gateway_drafts_on_the_draft_engine_and_charges_its_time(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from services.gateway.sdk import DynbranchClient
    from tests.factories import csl_service

    async with AsyncExitStack() as stack:
        csl = await stack.enter_async_context(csl_service(tmp_path / "csl"))
        main = await stack.enter_async_context(engine_agent(
            engine_id="e0", model=MODEL, preset="qwen3-32b-h200", time_scale=0.02))
        draft = await stack.enter_async_context(engine_agent(
            engine_id="d0", model="qwen3-0.6b", preset="qwen3-0.6b-h200", time_scale=0.02))
        gw = await stack.enter_async_context(gateway(
            [main.address, draft.address], csl=csl.address, predictor="draft",
            draft_model="qwen3-0.6b", draft_deadline_s=5.0))
        client = DynbranchClient(gw.address)
        stack.push_async_callback(client.close)
        client.use_builtin("routing")
        await client.call_stage("routing", "router", workflow_id="wf-1",
                                inputs={"functions": "[]", "query": "Book a flight"},
                                offered=["get_weather", "book_flight"])
        (branch,) = gw.core.branches.branches.values()
        await asyncio.wait_for(branch.ready.wait(), 10)
        predictor = gw.core.branches.predictor
        assert isinstance(predictor, DraftPredictor) and predictor.drafts == 1
        assert predictor.timeouts == predictor.failures == 0  # it ran on the draft engine
        assert branch.setup_s > 0  # the draft's time is the branch's setup, charged either way


async def test_drafting_needs_a_served_draft_model() -> None:
    with pytest.raises(ValueError, match="draft_model"):
        from services.gateway.config import GatewaySettings

        GatewaySettings(engines=["127.0.0.1:1"], predictor="draft", auth=False)
