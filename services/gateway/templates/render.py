"""Rendering a template stage into the exact input an engine or tool receives (DESIGN.md §3).

One function, :func:`render_stage`, is shared by the gateway (fills) and the client SDK
(canonical demands), so a fill whose candidate matches the selection renders byte-identical input
and derives the same reuse name (dynbranch §3.3, speculative–canonical equivalence).

Syntax: ``{{name}}`` (spaces inside the braces allowed) is replaced by the binding ``name``. The
substitution is a single pass: a value is inserted verbatim and never scanned again, so a value
containing ``{{x}}`` stays literal and nothing in a value can execute. Every placeholder must be
bound and every binding must be a placeholder of the stage; either fault names the variable.
An llm stage renders its prompt as UTF-8; a tool stage renders its arguments as canonical JSON
(sorted keys, no spaces, UTF-8, string values substituted), which is injective in the values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.common.values.errors import InvalidArgument, quoted
from services.common.values.generation import Sampling
from services.gateway.templates import (
    PLACEHOLDER,
    Binding,
    DecisionPoint,
    Stage,
    StageKind,
    Template,
    chatml,
)

#: Prefix of the fingerprint ``model`` of tool stages, e.g. ``tool:retrieve``.
TOOL_MODEL_PREFIX = "tool:"


@dataclass(frozen=True, slots=True)
class RenderedStage:
    """A stage rendered for execution: its complete input and every other result-determining field.

    ``input`` is the prompt (llm) or the tool arguments (tool) as UTF-8 bytes; it is what the
    reuse name hashes. ``fingerprint_fields()`` gives the keyword arguments of
    ``services.common.values.reuse_name.StageFingerprint``.
    """

    template_id: str
    template_version: int
    stage_id: str
    stage_version: int
    kind: StageKind
    model: str
    input: bytes
    sampling: Sampling | None = None
    tool: str = ""
    speculable: bool = False
    shared: bool = False

    @property
    def text(self) -> str:
        """The rendered input as text (the demand's ``prompt`` field)."""
        return self.input.decode("utf-8")

    def fingerprint_fields(self) -> dict[str, Any]:
        """Fields of the stage fingerprint, named as ``StageFingerprint`` names them."""
        fields: dict[str, Any] = {"template_id": self.template_id, "stage_id": self.stage_id,
                                  "stage_version": self.stage_version, "model": self.model}
        if self.sampling is not None:
            s = self.sampling
            fields |= {"temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k,
                       "seed": s.seed, "max_tokens": s.max_tokens, "stop": s.stop,
                       "ignore_eos": s.ignore_eos}
        return fields


def render_text(text: str, bindings: Mapping[str, str]) -> str:
    """Substitute every ``{{name}}`` in one pass; values are inserted verbatim."""
    return PLACEHOLDER.sub(lambda m: bindings[m.group(1)], text)


def render_prompt(stage: Stage, bindings: Mapping[str, str]) -> str:
    """An llm stage's prompt text; a stage in chat form as the ChatML of its turns."""
    text = render_text(stage.prompt, bindings)
    if not stage.chat:
        return text
    turns = [{"role": "user", "content": text}]
    if stage.system:
        turns.insert(0, {"role": "system", "content": render_text(stage.system, bindings)})
    return chatml.render(turns)


def render_stage(template: Template, stage_id: str, bindings: Mapping[str, str]) -> RenderedStage:
    """Render one stage of ``template`` with placeholder values ``bindings``."""
    stage = template.stage(stage_id)
    _check_bindings(template, stage, bindings)
    if stage.kind is StageKind.LLM:
        data = _utf8(render_prompt(stage, bindings), "bindings")
        return RenderedStage(template.id, template.version, stage.id, stage.version, stage.kind,
                             stage.model, data, stage.sampling, speculable=stage.speculable,
                             shared=stage.shared)
    return RenderedStage(template.id, template.version, stage.id, stage.version, stage.kind,
                         TOOL_MODEL_PREFIX + stage.tool, render_args(stage, bindings),
                         tool=stage.tool, speculable=stage.speculable, shared=stage.shared)


def render_args(stage: Stage, bindings: Mapping[str, str]) -> bytes:
    """A tool stage's arguments as canonical JSON bytes."""
    args = {k: render_text(v, bindings) if isinstance(v, str) else v for k, v in stage.args}
    text = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)
    return _utf8(text, "bindings")


def resolve_bindings(template: Template, coordinate: str, candidate: str, stage_id: str, *,
                     inputs: Mapping[str, str], outputs: Mapping[str, str]) -> dict[str, str]:
    """Placeholder values of ``stage_id`` in ``candidate``'s subgraph at ``coordinate``.

    ``inputs`` are the values the harness passed with the branch (``input.<name>``);
    ``outputs`` are the known outputs of upstream stages and of earlier steps of this chain.
    """
    point = template.decision(coordinate)
    _check_candidate(point, candidate)
    step = next((s for s in point.chain_for(candidate) if s.stage == stage_id), None)
    if step is None:
        raise InvalidArgument("stage_id", f"stage {quoted(stage_id)} is not in the subgraph of "
                                          f"candidate {quoted(candidate)} at {point.coordinate}")
    return _resolve(step.bind, stage_id, candidate, inputs, outputs)


def resolve_stage_bindings(template: Template, stage_id: str, *, inputs: Mapping[str, str],
                           outputs: Mapping[str, str],
                           values: Mapping[str, str] | None = None) -> dict[str, str]:
    """Placeholder values of a stage called on its own (not as a branch candidate's step).

    The stage's default ``bind`` is resolved from ``inputs`` and ``outputs``; ``values`` gives
    placeholders directly and wins over the defaults.
    """
    given = dict(values or {})
    bind = tuple((n, src) for n, src in template.stage(stage_id).bind if n not in given)
    return _resolve(bind, stage_id, None, inputs, outputs) | given


def _resolve(bind: Binding, stage_id: str, candidate: str | None, inputs: Mapping[str, str],
             outputs: Mapping[str, str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for name, source in bind:
        if source.kind == "candidate":
            if candidate is None:
                raise InvalidArgument(f"values.{name}", f"stage {stage_id} binds {{{{{name}}}}} "
                                                       "to the candidate: pass it")
            values[name] = candidate
            continue
        pool, field = (inputs, "inputs") if source.kind == "input" else (outputs, "outputs")
        if source.name not in pool:
            raise InvalidArgument(f"{field}.{source.name}", f"needed for {{{{{name}}}}} of "
                                                           f"stage {stage_id}, not given")
        values[name] = pool[source.name]
    return values


def render_candidate_stage(template: Template, coordinate: str, candidate: str, stage_id: str,
                           *, inputs: Mapping[str, str],
                           outputs: Mapping[str, str]) -> RenderedStage:
    """Render one stage of a candidate's subgraph, as the gateway does for a fill."""
    bindings = resolve_bindings(template, coordinate, candidate, stage_id, inputs=inputs,
                                outputs=outputs)
    return render_stage(template, stage_id, bindings)


def _check_bindings(template: Template, stage: Stage, bindings: Mapping[str, str]) -> None:
    where = f"{template.id}/{stage.id}"
    for name in stage.inputs:
        if name not in bindings:
            raise InvalidArgument(f"bindings.{name}", f"missing: stage {where} uses {{{{{name}}}}}")
        if not isinstance(bindings[name], str):
            raise InvalidArgument(f"bindings.{name}", "must be a string")
    for name in bindings:
        if name not in stage.inputs:
            raise InvalidArgument(f"bindings.{name}", f"stage {where} has no such placeholder")


def _check_candidate(point: DecisionPoint, candidate: str) -> None:
    if not isinstance(candidate, str) or not candidate:
        raise InvalidArgument("candidate", "must be a non-empty string")
    if point.candidates and candidate not in point.candidates:
        raise InvalidArgument("candidate", f"{quoted(candidate)} is not a candidate of "
                                           f"{point.coordinate}")


def _utf8(text: str, field: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(field, f"not encodable as UTF-8 ({exc.reason})") from None


__all__ = [
    "TOOL_MODEL_PREFIX", "RenderedStage", "render_args", "render_candidate_stage", "render_prompt",
    "render_stage", "render_text", "resolve_bindings", "resolve_stage_bindings",
]
