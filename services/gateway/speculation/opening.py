"""Whether, and which, candidates of a new branch are filled: admission's generation gate
(Action 0), the predictor's ranking, then admission's fill gate (Action 1) over each candidate's
estimated cost (dynbranch §3.4, DESIGN.md §4).

The branch manager asks ``Gates.admitted`` once per branch it opens, from the branch's launch
task, and starts one fill per admitted candidate. The estimates read the decode pace the
executor learns (``pace``) and name each candidate's first stage as its fill would
(``FillRunner.named``), so a demand that selects a candidate no fill ran for still tells
admission which rank was selected (``Branch.predicted``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from opentelemetry.trace import Tracer

from services.common.values import clock
from services.common.values.candidates import FillEstimate, RankedCandidate
from services.common.values.errors import InvalidArgument
from services.common.values.tracing import maybe_span
from services.gateway.pace import DecodePace
from services.gateway.ports import AdmissionPort
from services.gateway.speculation.fills import FillRunner
from services.gateway.speculation.predictors import Predictor, context_for
from services.gateway.speculation.state import Branch
from services.gateway.templates import StageKind, Window
from services.gateway.values import Demand

log = logging.getLogger(__name__)


class Gates:
    """Admission's two gates and the predictor between them, for the branches a manager opens."""

    def __init__(self, admission: AdmissionPort, predictor: Predictor, pace: DecodePace,
                 fills: FillRunner, tracer: Tracer) -> None:
        self.admission = admission
        self.predictor = predictor
        self.pace = pace
        self.fills = fills
        self.tracer = tracer

    async def admitted(self, branch: Branch, d: Demand,
                       siblings: Callable[[], Iterable[Branch]]) -> list[tuple[int, str]]:
        """The candidates to fill for ``branch``, opened by ``d``, with their ranks: none when
        the generation gate keeps it closed (or it resolved meanwhile), else the predictor's
        ranking through the fill gate. ``siblings``: the workflow's branches open now, read
        once the generation gate answered (a candidate one of them selected at this point is
        not predicted again)."""
        coordinate = branch.point.coordinate
        with maybe_span(self.tracer, "branch.generation_gate") as span:
            # the branch class: branches that share a coordinate pool their statistics (§3.4)
            is_open = await self.admission.open_branch(branch.id, coordinate,
                                                       f"{branch.tenant}/{coordinate}", d.model)
            span.set_attribute("dynbranch.open", is_open)
        if not is_open or branch.resolved:
            return []
        searched = [b.winner for b in siblings()
                    if b.point.coordinate == coordinate and b.winner]
        try:  # a candidate this workflow already selected at this point is not predicted again
            context = context_for(branch.point, offered=d.offered, observation=d.observation,
                                  exclude=searched)
        except InvalidArgument as exc:
            log.warning("branch %s not filled: %s", branch.id, exc)
            return []
        arank = getattr(self.predictor, "arank", None)  # a drafted predictor decodes: async
        ranked = (await arank(coordinate, context) if arank is not None
                  else self.predictor.rank(coordinate, context))
        with maybe_span(self.tracer, "branch.fill_gate") as span:
            window = 0.0  # a user's think time is not known in advance
            if branch.point.window is not Window.USER and d.sampling is not None:
                window = self.pace.window_s(d.model, d.sampling.max_tokens,
                                            clock.now() - branch.opened_at)
            admitted = await self.admission.admit(branch.id, coordinate, ranked, d.model,
                                                  window, self._estimates(branch, ranked),
                                                  visit=branch.visit)
            span.set_attribute("dynbranch.admitted", ",".join(admitted))
        ranks = {c.candidate: c.rank for c in ranked}
        return [(ranks.get(c, len(ranks)), c) for c in admitted if c in ranks]

    def _estimates(self, branch: Branch, ranked: list[RankedCandidate]
                   ) -> dict[str, FillEstimate]:
        """What each candidate's fill would cost: its subgraph's llm stages' output tokens at
        the decode pace learned for their models (0 until a pace is known), the prompt tokens
        of its first stage rendered as the fill would render it and that prompt + max_tokens
        (0 when it cannot be rendered yet), and its stage count. The first stage's reuse name
        is kept (``Branch.predicted``): a demand that selects a candidate no fill ran for still
        tells admission which rank was selected."""
        out: dict[str, FillEstimate] = {}
        pace = self.pace
        for c in ranked:
            chain = branch.point.chain_for(c.candidate)
            total: float | None = 0.0
            for step in chain:
                stage = branch.template.stage(step.stage)
                if stage.kind is StageKind.LLM and stage.sampling is not None and total is not None:
                    per_token = pace.engine_s_per_token(stage.model or branch.model)
                    total = (None if per_token is None
                             else total + stage.sampling.max_tokens * per_token)
            prompt = peak = 0
            first = self.fills.named(branch, c.candidate, chain[0].stage,
                                     dict(branch.outputs)) if chain else None
            if first is not None:
                rendered, name = first
                branch.predict(c.candidate, name)
                if rendered.sampling is not None:
                    prompt = pace.prompt_tokens(rendered.model, rendered.text)
                    peak = prompt + rendered.sampling.max_tokens
            out[c.candidate] = FillEstimate(total or 0.0, prompt, peak, max(len(chain), 1))
        return out


__all__ = ["Gates"]
