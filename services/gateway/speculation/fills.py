"""Running one fill: a candidate's downstream chain with fill priority, each step stored as a
shadow whose read-set names the previous step as its producer (chained promotion).

With C1 on, a step is never computed twice: one whose name the library holds confirmed takes
that result, and one whose name is being executed canonically on this gateway right now (an
exact repeat arriving while its original runs: single-flight, ``stages``) waits for that
execution and takes its result, so the chain goes on without engine work; a demand for such a
step does not adopt it but joins the canonical execution (``promotion``)."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable

from opentelemetry.trace import Tracer

from services.common.values.errors import DynbranchError, InvalidArgument
from services.common.values.generation import Priority
from services.common.values.reads import ReadSet, Shadow
from services.common.values.reuse_name import ReuseName
from services.common.values.tracing import maybe_span
from services.gateway.execution import Executor
from services.gateway.ports import LibraryPort
from services.gateway.reuse.freshness import Freshness
from services.gateway.reuse.naming import Naming
from services.gateway.reuse.single_flight import SingleFlight
from services.gateway.speculation.state import (
    Branch,
    BranchSettings,
    Fill,
    FillStep,
    producer_id,
    span_attrs,
)
from services.gateway.templates import Stage, StageKind
from services.gateway.templates.render import RenderedStage, render_candidate_stage
from services.gateway.values import Demand, StoredResult

log = logging.getLogger(__name__)


class FillRunner:
    """Executes fills for the branch manager."""

    def __init__(self, executor: Executor, library: LibraryPort, settings: BranchSettings,
                 tracer: Tracer, *, naming: Naming, freshness: Freshness,
                 single_flight: SingleFlight, c1: bool = True,
                 hold: Callable[[Branch, Fill, FillStep], None] | None = None) -> None:
        self.executor = executor
        self.library = library
        self.naming = naming
        self.freshness = freshness
        self.single_flight = single_flight
        #: Exact reuse (C1) is on: a step takes a current library entry or a running
        #: canonical execution of its name instead of running again.
        self.c1 = c1
        self.settings = settings
        self.tracer = tracer
        #: Starts holding a step's placeholder in the library while it runs (gateway replicas).
        self.hold = hold
        self._seq = itertools.count()
        #: Fill steps answered by a canonical execution of their name that was running when
        #: they would have started (single-flight: ``stages``), instead of running it again
        #: (the manager's ``fill_steps_joined``).
        self.joined = 0

    async def run(self, branch: Branch, fill: Fill) -> None:
        """Run ``fill``'s chain until a step cannot be filled; every step's event ends set."""
        outputs = dict(branch.outputs)
        previous: ReuseName | None = None
        try:
            for i, step_def in enumerate(branch.point.chain_for(fill.candidate)):
                step = FillStep(step_def.stage)
                fill.planned(step)
                output = await self._run_step(branch, fill, step, i, outputs, previous)
                if output is None:
                    return
                outputs[step.stage_id], previous = output, step.name
        except (DynbranchError, TimeoutError) as exc:
            log.info("fill %s/%s ended: %s", branch.id, fill.candidate, exc)
        finally:
            for step in fill.steps:
                step.finish()
                if not step.ok:
                    step.drop_hold()  # no shadow will come: drop the placeholder

    def named(self, branch: Branch, candidate: str, stage_id: str,
              outputs: dict[str, str]) -> tuple[RenderedStage, ReuseName] | None:
        """A candidate's stage rendered and named as its fill would run it; None when it
        depends on a value only the canonical path will know, or may not run speculatively."""
        stage = branch.template.stage(stage_id)
        try:
            rendered = render_candidate_stage(branch.template, branch.point.coordinate,
                                              candidate, stage_id, inputs=branch.inputs,
                                              outputs=outputs)
        except InvalidArgument:
            return None
        if not rendered.speculable:
            return None
        fp = self.naming.fingerprint(rendered.template_id, rendered.stage_id,
                                     rendered.stage_version, rendered.model, rendered.sampling,
                                     stage)
        name = self.naming.name_for(branch.tenant, fp, rendered.input, stage, rendered.sampling)
        return (rendered, name) if name is not None else None

    async def _run_step(self, branch: Branch, fill: Fill, step: FillStep, index: int,
                        outputs: dict[str, str], previous: ReuseName | None) -> str | None:
        stage = branch.template.stage(step.stage_id)
        found = self.named(branch, fill.candidate, step.stage_id, outputs)
        if found is None:
            return None
        rendered, name = found
        step.named_as(name)
        if self.c1:
            hit = await self.library.lookup(name)
            stored = StoredResult.decode(hit.result) if hit is not None else None
            if stored is not None and await self.freshness.reads_current(stored.reads):
                step.answered()
                return stored.text
            running = self.single_flight.running(branch.tenant, name)
            if running is not None:  # computed canonically right now: wait, never run it twice
                step.joining(True)  # its demand joins that execution, not this step
                run = await self.single_flight.identical_run(running,
                                                             self.settings.fill_timeout_s)
                if run is not None:
                    self.joined += 1
                    step.joined()
                    return run.stored.text
                step.joining(False)  # that execution failed or read a record since: run it
        return await self._execute_step(branch, fill, step, index, rendered, stage, previous)

    async def _execute_step(self, branch: Branch, fill: Fill, step: FillStep, index: int,
                            rendered: RenderedStage, stage: Stage,
                            previous: ReuseName | None) -> str | None:
        assert step.name is not None
        request_id = f"fill-{branch.id}-{next(self._seq)}"
        if stage.kind is StageKind.LLM:  # an engine generation: a demand may adopt it
            step.started(request_id)
        demand = Demand(tenant=branch.tenant, request_id=request_id, model=rendered.model,
                        prompt=rendered.text, sampling=rendered.sampling,
                        workflow_id=branch.workflow_id, template_id=rendered.template_id,
                        stage_id=rendered.stage_id, stage_version=rendered.stage_version)
        if self.hold is not None:
            self.hold(branch, fill, step)
        with maybe_span(self.tracer, "fill.run", attributes=span_attrs(
                branch, fill, step.name)):
            run = await self.executor.execute(demand, stage, Priority.FILL, request_id,
                                            self.settings.fill_timeout_s)
        fill.spent(run.cost_s)
        if not run.storable:
            step.ran(run.cost_s, "")
            return None
        read_set = ReadSet(run.read_set.reads, run.read_set.complete,
                           (previous,) if previous is not None else ())
        step.ran(run.cost_s, producer_id(branch.id, fill.candidate, index))
        shadow = Shadow(step.name, branch.id, fill.candidate, fill.rank, step.producer,
                        run.stored.encode(), read_set, run.cost_s)
        with maybe_span(self.tracer, "shadow.store", attributes=span_attrs(
                branch, fill, step.name)):
            step.stored(await self.library.put_shadow(shadow, self.settings.shadow_ttl_s))
        return run.stored.text if step.ok else None


__all__ = ["FillRunner"]
