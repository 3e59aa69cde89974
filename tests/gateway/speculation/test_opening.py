"""Opening a branch's fills (``speculation.opening.Gates``): the generation gate, the predictor's
ranking (minus what a sibling branch already selected), the fill gate and the ranks of what it
admitted, and each candidate's estimated cost."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

from opentelemetry.trace import NoOpTracer

from services.admission.client import StaticAdmission
from services.common.values.candidates import FillEstimate, RankedCandidate
from services.gateway.execution import Executor
from services.gateway.pace import DecodePace
from services.gateway.reuse.freshness import Freshness
from services.gateway.reuse.naming import Naming
from services.gateway.reuse.single_flight import SingleFlight
from services.gateway.speculation.fills import FillRunner
from services.gateway.speculation.opening import Gates
from services.gateway.speculation.predictors import TemplateEnumeration
from services.gateway.speculation.state import Branch, BranchSettings
from services.gateway.templates import TemplateRegistry, load_builtin
from services.gateway.values import Features
from tests.gateway.local_ports import MODEL, ROUTING_FUNCTIONS, routing_demand

ROUTING = load_builtin("routing")  # router decides among the offered functions; 2-stage chain
HCI = load_builtin("hci")
INPUTS = {"functions": json.dumps([{"name": f} for f in ROUTING_FUNCTIONS]),
          "query": "Book me a flight from Oslo to Rome on Friday."}
DEMAND = routing_demand("acme", "wf", "router", INPUTS)  # offers ROUTING_FUNCTIONS


class _Admission(StaticAdmission):
    """The fixed policy, recording what the fill gate was asked; ``admits`` replaces its answer
    and ``on_open`` runs while the generation gate is asked."""

    def __init__(self, open_branches: bool = True, admits: Sequence[str] | None = None,
                 on_open: Callable[[], None] | None = None) -> None:
        super().__init__(open_branches=open_branches, top_k=2)
        self.admits, self.on_open = admits, on_open
        self.asked: list[str] | None = None
        self.estimates: dict[str, FillEstimate] = {}
        self.visits: list[int] = []

    async def open_branch(self, branch_id: str, coordinate: str, branch_class: str,
                          model: str) -> bool:
        if self.on_open is not None:
            self.on_open()
        return await super().open_branch(branch_id, coordinate, branch_class, model)

    async def admit(self, branch_id: str, coordinate: str, candidates: Sequence[RankedCandidate],
                    model: str, window_s: float = 0.0,
                    estimates: Mapping[str, FillEstimate] | None = None,
                    visit: int = 0) -> list[str]:
        self.asked, self.estimates = [c.candidate for c in candidates], dict(estimates or {})
        self.visits.append(visit)
        chosen = await super().admit(branch_id, coordinate, candidates, model, window_s)
        return chosen if self.admits is None else list(self.admits)


def _gates(admission: StaticAdmission) -> Gates:
    """Gates over a fill runner named as the manager's (``bare_manager``), which never runs."""
    registry = TemplateRegistry()
    registry.register(ROUTING)
    features, freshness, pace = Features(), Freshness({}), DecodePace()
    executor = Executor(engines=None, tools={}, pace=pace)  # type: ignore[arg-type]
    fills = FillRunner(executor, None, BranchSettings(), NoOpTracer(),  # type: ignore[arg-type]
                       naming=Naming(registry=registry, tools={}, features=features),
                       freshness=freshness, single_flight=SingleFlight(freshness))
    return Gates(admission, TemplateEnumeration(), pace, fills, NoOpTracer())


def _branch(branch_id: str = "b1", template_id: str = "routing", winner: str = "",
            inputs: dict[str, str] | None = None) -> Branch:
    template = ROUTING if template_id == "routing" else HCI
    return Branch(id=branch_id, tenant="acme", workflow_id="wf", template=template,
                  point=template.decisions[0], inputs=dict(INPUTS if inputs is None else inputs),
                  outputs={}, model=MODEL, winner=winner)


async def test_a_closed_generation_gate_or_a_branch_resolved_meanwhile_fills_nothing() -> None:
    closed = _Admission(open_branches=False)
    assert await _gates(closed).admitted(_branch(), DEMAND, list) == []
    branch = _branch()
    meanwhile = _Admission(on_open=lambda: setattr(branch, "resolved", True))
    assert await _gates(meanwhile).admitted(branch, DEMAND, list) == []
    assert closed.asked is None and meanwhile.asked is None  # the fill gate was never asked


async def test_admitted_candidates_keep_the_predictors_ranks() -> None:
    policy = _Admission()  # top 2 of the predictor's ranking
    assert await _gates(policy).admitted(_branch(), DEMAND, list) == [
        (0, "get_weather"), (1, "book_flight")]
    assert policy.asked == list(ROUTING_FUNCTIONS)
    scripted = _Admission(admits=["convert_currency", "get_weather", "never_ranked"])
    assert await _gates(scripted).admitted(_branch(), DEMAND, list) == [
        (2, "convert_currency"), (0, "get_weather")]


async def test_the_fill_gate_is_told_the_branchs_visit_to_its_coordinate() -> None:
    admission = _Admission()
    gates = _gates(admission)
    for visit in (0, 2):
        branch = _branch()
        branch.visit = visit
        await gates.admitted(branch, DEMAND, list)
    assert admission.visits == [0, 2]


async def test_a_candidate_a_sibling_selected_at_the_same_point_is_not_predicted_again() -> None:
    admission = _Admission()
    siblings = [_branch("b0", winner="get_weather"), _branch("b2"),
                _branch("b3", template_id="hci", winner="book_flight")]  # another coordinate
    assert await _gates(admission).admitted(_branch(), DEMAND, lambda: siblings) == [
        (0, "book_flight"), (1, "convert_currency")]
    assert admission.asked == ["book_flight", "convert_currency"]
    assert set(admission.estimates) == {"book_flight", "convert_currency"}


def test_estimates_cost_nothing_until_a_pace_is_known_and_name_each_first_stage() -> None:
    gates = _gates(_Admission())
    branch = _branch()
    ranked = [RankedCandidate("get_weather", 0, 0.6), RankedCandidate("book_flight", 1, 0.4)]
    unknown = gates._estimates(branch, ranked)
    rendered, first = gates.fills.named(branch, "get_weather", "handler", {}) or (None, None)
    assert rendered is not None and rendered.sampling is not None
    prompt = gates.pace.prompt_tokens(MODEL, rendered.text)
    assert prompt > 0
    assert unknown["get_weather"] == FillEstimate(0.0, prompt, prompt + 256, 2)  # handler, executor
    assert branch.predicted["get_weather"] == first
    assert branch.predicted["book_flight"] not in (None, first)
    gates.pace.observe(MODEL, wall_s=1.0, engine_s=2.0, tokens=100)  # 0.02 engine s a token
    known = gates._estimates(branch, ranked)["get_weather"]
    assert abs(known.exec_s - (256 + 256) * 0.02) < 1e-9  # both llm stages' max_tokens
    unrendered = _branch("b4", inputs={})  # the handler's inputs are not known yet
    assert gates._estimates(unrendered, ranked)["book_flight"] == FillEstimate(
        (256 + 256) * 0.02, 0, 0, 2)
    assert unrendered.predicted == {}
