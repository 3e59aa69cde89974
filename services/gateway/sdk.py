"""Client SDK for agent harnesses (async Python).

It renders template stages with the same function the gateway uses for fills
(``services.gateway.render``), so a demand whose branch was predicted correctly is byte-identical
to the fill and is served from its shadow. Typical use::

    async with DynbranchClient("127.0.0.1:50051", api_key="...") as db:
        db.use_builtin("routing")  # a template the gateway ships, kept for rendering
        router = await db.call_stage("routing", "router", workflow_id="wf-1",
                                     inputs={"functions": fns, "query": q}, offered=names)
        choice = parse(router.text)
        handler = await db.call_stage("routing", "handler", workflow_id="wf-1", inputs=...,
                                      coordinate="routing/router", candidate=choice)

For user-offered choices (HCI): call the offering stage with ``offered=[...]`` (that opens the
branch: the follow-ups fill while the user thinks), then either call the follow-up stage with the
picked ``candidate`` or report the pick with :meth:`DynbranchClient.settle`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import yaml

from services.common.pb import common_pb2, gateway_pb2, gateway_pb2_grpc
from services.common.runtime.clients import StreamCall, open_channel
from services.common.runtime.convert import sampling_to_proto
from services.gateway.templates import Template, TemplateRegistry, load_builtin, parse_template
from services.gateway.templates.render import (
    RenderedStage,
    render_candidate_stage,
    render_stage,
    resolve_stage_bindings,
)


class DynbranchClient:
    """Renders and calls template stages through the gateway; owns its channel."""

    def __init__(self, target: str, api_key: str = "", timeout_s: float = 120.0) -> None:
        self.channel = open_channel(target)
        self.stub = gateway_pb2_grpc.GatewayStub(self.channel)
        self.metadata = (("authorization", f"Bearer {api_key}"),) if api_key else ()
        self.timeout_s = timeout_s
        self.templates = TemplateRegistry()

    # -- templates ------------------------------------------------------------------------------

    async def register_yaml(self, text: str) -> Template:
        """Register a template with the gateway and keep it for local rendering."""
        template = parse_template(yaml.safe_load(text))
        await self.stub.RegisterTemplate(gateway_pb2.RegisterTemplateRequest(yaml=text),
                                         timeout=self.timeout_s, metadata=self.metadata)
        return self.templates.register(template)

    async def register_file(self, path: str | Path) -> Template:
        """Register a template file."""
        return await self.register_yaml(Path(path).read_text())

    def use_builtin(self, name: str) -> Template:
        """Use a template the gateway ships (``routing``, ``react``, ``subagent``, ``hci``)."""
        return self.templates.register(load_builtin(name))

    # -- rendering ------------------------------------------------------------------------------

    def render(self, template_id: str, stage_id: str, *, inputs: Mapping[str, str],
               outputs: Mapping[str, str] | None = None, coordinate: str = "",
               candidate: str | None = None, values: Mapping[str, str] | None = None,
               max_tokens: int | None = None) -> RenderedStage:
        """Render a stage exactly as the gateway renders fills; ``max_tokens`` caps this call's
        decode instead of the stage's own (so rendered, a stage matches none of its fills: cap
        a deciding stage, never a candidate's)."""
        template = self.templates.get(template_id)
        outputs = outputs or {}
        if candidate is not None:
            point = coordinate or self._coordinate_of(template, stage_id)
            rendered = render_candidate_stage(template, point, candidate, stage_id,
                                              inputs=inputs, outputs=outputs)
        else:
            bindings = resolve_stage_bindings(template, stage_id, inputs=inputs,
                                              outputs=outputs, values=values)
            rendered = render_stage(template, stage_id, bindings)
        if max_tokens is None or rendered.sampling is None:  # a tool stage decodes nothing
            return rendered
        return replace(rendered, sampling=replace(rendered.sampling, max_tokens=max_tokens))

    @staticmethod
    def _coordinate_of(template: Template, stage_id: str) -> str:
        for point in template.decisions:
            if any(step.stage == stage_id for step in point.chain_for("")) or any(
                    step.stage == stage_id for _, chain in point.per_candidate for step in chain):
                return point.coordinate
        raise ValueError(f"stage {stage_id!r} is in no decision point's subgraph of "
                         f"{template.id}; pass coordinate=")

    # -- calls ----------------------------------------------------------------------------------

    async def call_stage(self, template_id: str, stage_id: str, *, workflow_id: str,
                         inputs: Mapping[str, str], outputs: Mapping[str, str] | None = None,
                         coordinate: str = "", candidate: str | None = None,
                         values: Mapping[str, str] | None = None, offered: Sequence[str] = (),
                         observation: str = "", workflow_type: str = "", agent_id: str = "",
                         request_id: str = "", timeout_s: float | None = None,
                         max_tokens: int | None = None) -> gateway_pb2.CallResponse:
        """Render a template stage (``max_tokens``: as ``render``) and run it through the
        gateway."""
        demand = self._stage_demand(
            template_id, stage_id, workflow_id=workflow_id, inputs=inputs, outputs=outputs,
            coordinate=coordinate, candidate=candidate, values=values, offered=offered,
            observation=observation, workflow_type=workflow_type, agent_id=agent_id,
            request_id=request_id, max_tokens=max_tokens)
        reply: gateway_pb2.CallResponse = await self.stub.Call(
            gateway_pb2.CallRequest(demand=demand), timeout=timeout_s or self.timeout_s,
            metadata=self.metadata)
        return reply

    def stream_stage(self, template_id: str, stage_id: str, *, workflow_id: str,
                     inputs: Mapping[str, str], outputs: Mapping[str, str] | None = None,
                     coordinate: str = "", candidate: str | None = None,
                     values: Mapping[str, str] | None = None, offered: Sequence[str] = (),
                     observation: str = "", workflow_type: str = "", agent_id: str = "",
                     request_id: str = "", timeout_s: float | None = None,
                     max_tokens: int | None = None) -> StreamCall[gateway_pb2.CallEvent]:
        """``call_stage``, streamed (the CallStream rpc): text as it is decoded (by the demand's
        own execution or the fill it adopted), then the whole answer."""
        demand = self._stage_demand(
            template_id, stage_id, workflow_id=workflow_id, inputs=inputs, outputs=outputs,
            coordinate=coordinate, candidate=candidate, values=values, offered=offered,
            observation=observation, workflow_type=workflow_type, agent_id=agent_id,
            request_id=request_id, max_tokens=max_tokens)
        call: StreamCall[gateway_pb2.CallEvent] = self.stub.CallStream(
            gateway_pb2.CallRequest(demand=demand), timeout=timeout_s or self.timeout_s,
            metadata=self.metadata)
        return call

    def _stage_demand(self, template_id: str, stage_id: str, *, workflow_id: str,
                      inputs: Mapping[str, str], outputs: Mapping[str, str] | None,
                      coordinate: str, candidate: str | None, values: Mapping[str, str] | None,
                      offered: Sequence[str], observation: str, workflow_type: str,
                      agent_id: str, request_id: str, max_tokens: int | None
                      ) -> common_pb2.StageDemand:
        rendered = self.render(template_id, stage_id, inputs=inputs, outputs=outputs,
                               coordinate=coordinate, candidate=candidate, values=values,
                               max_tokens=max_tokens)
        demand = common_pb2.StageDemand(
            workflow_type=workflow_type or template_id, workflow_id=workflow_id,
            agent_id=agent_id, template_id=template_id, stage_id=stage_id,
            stage_version=rendered.stage_version, model=rendered.model, prompt=rendered.text,
            inputs=dict(inputs), outputs=dict(outputs or {}), offered=list(offered),
            observation=observation)
        demand.header.id = request_id or uuid.uuid4().hex
        if rendered.sampling is not None:
            demand.sampling.CopyFrom(sampling_to_proto(rendered.sampling))
        return demand

    async def call(self, prompt: str, model: str, *, max_tokens: int, temperature: float = 0.0,
                   seed: int | None = None, timeout_s: float | None = None
                   ) -> gateway_pb2.CallResponse:
        """Run an untagged prompt (still reused exactly when deterministic)."""
        sampling = common_pb2.SamplingParams(max_tokens=max_tokens, temperature=temperature)
        if seed is not None:
            sampling.seed = seed
        demand = common_pb2.StageDemand(model=model, prompt=prompt, sampling=sampling)
        reply: gateway_pb2.CallResponse = await self.stub.Call(
            gateway_pb2.CallRequest(demand=demand), timeout=timeout_s or self.timeout_s,
            metadata=self.metadata)
        return reply

    async def settle(self, workflow_id: str, coordinate: str, selected: str) -> int:
        """Report a harness-side selection (e.g. the user's pick); returns branches settled."""
        reply: gateway_pb2.SettleBranchResponse = await self.stub.SettleBranch(
            gateway_pb2.SettleBranchRequest(workflow_id=workflow_id, coordinate=coordinate,
                                            selected=selected),
            timeout=self.timeout_s, metadata=self.metadata)
        return reply.settled

    async def write(self, *, upserts: Sequence[tuple[str, str, str]] = (),
                    removals: Sequence[str] = (), record_ids: Sequence[str] = ()
                    ) -> dict[str, int]:
        """Write corpus documents ``(doc_id, title, text)`` or record ids; new versions by id."""
        reply: gateway_pb2.GatewayWriteResponse = await self.stub.WriteRecords(
            gateway_pb2.GatewayWriteRequest(
                upserts=[gateway_pb2.Document(doc_id=d, title=t, text=x) for d, t, x in upserts],
                removals=list(removals), record_ids=list(record_ids)),
            timeout=self.timeout_s, metadata=self.metadata)
        return {v.record_id: v.version for v in reply.versions}

    async def close(self) -> None:
        """Close the channel; idempotent."""
        await self.channel.close()

    async def __aenter__(self) -> DynbranchClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["DynbranchClient"]
