"""Workflow templates: stages, decisions and candidate subgraphs (DESIGN.md §3, dynbranch §2.1).

The harness registers a template as YAML or as the same structure in a dict (gRPC). Schema, with
unknown keys refused at every level::

    id: routing                # [A-Za-z0-9][A-Za-z0-9_.-]*; a changed body needs a higher version
    version: 1
    model: qwen3-32b           # optional default model of llm stages; description: optional
    stages:
      - id: router
        kind: llm              # llm | tool
        version: 1             # optional; in the reuse name: bump when a result changes for a
                               # reason the rendered input does not show (e.g. a tool's code)
        prompt: "... {{query}}"                       # llm; {{name}} placeholders (render.py)
        sampling: {max_tokens: 64, temperature: 0}    # llm; also top_p top_k seed stop ignore_eos
        tool: retrieve                                # tool; builtin or harness-run
        args: {query: "{{entity}}", k: 5}             # tool; flat map of scalars
        read_only: true        # tool; builtins know their own
        speculable: true       # may run twice: greedy/seeded llm or read-only tool only
        shared: false          # opt in to cross-tenant reuse
        bind: {query: input.query}                    # default bindings of placeholders
    decisions:
      - stage: router          # coordinate "routing/router"
        space: bounded         # bounded (candidates: [..] or offered: true) | open
        offered: true          # bounded list the harness offers per request
        semantics: exclusive   # exclusive | independent
        window: decode         # decode: fills overlap the deciding stage's decode (default);
                               # user: they overlap a user's choice after it (may read its output)
        subgraph:              # the chain a candidate runs: one or more stages
          - {stage: handler, bind: {function: candidate}}
          - executor           # shorthand: no extra bindings
        per_candidate: {}      # optional chain per listed candidate

A binding source is ``candidate``, ``input.<name>`` (a value the harness passes) or
``stages.<id>.output``. A subgraph step may read earlier steps and stages that finish before the
branch; it reads the deciding stage only when a user resolves the branch (``window: user``), since
during a decode that output is what the candidate stands for. Sampling floats
are rounded to binary32, the wire width, so a template and a decoded demand carry equal values.

Bounds (``registry.py``, ``parse.py``): a registered document is at most 256 KiB of YAML, nested
at most 16 nodes deep, of at most 16,384 nodes; at most 256 stages, 256 listed candidates per
decision, and 16 stop strings of at most 256 characters per stage. Past one, registration is
refused naming the field (``yaml`` or the path inside the template).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any

from services.common.values.errors import InvalidArgument, NotFound, quoted
from services.common.values.generation import Sampling

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
Scalar = str | int | float | bool | None


class StageKind(enum.StrEnum):
    """What executes a stage."""

    LLM = "llm"
    TOOL = "tool"


class CandidateSpace(enum.StrEnum):
    """Whether a decision's candidates can be enumerated (dynbranch §2.1)."""

    BOUNDED = "bounded"
    OPEN = "open"


class Semantics(enum.StrEnum):
    """Promotion semantics: one winner, or every offered candidate stays valid (§3.3)."""

    EXCLUSIVE = "exclusive"
    INDEPENDENT = "independent"


class Window(enum.StrEnum):
    """What resolves a branch: the deciding stage's decode, or a user after it finished."""

    DECODE = "decode"
    USER = "user"


class TemplateError(InvalidArgument):
    """A template failed validation; the message names the template and the fault's path."""

    def __init__(self, template_id: str, path: str, message: str) -> None:
        super().__init__(f"template {template_id}: {path}", message)
        self.template_id, self.path = template_id, path


@dataclass(frozen=True, slots=True)
class PlaceholderSource:
    """Where a placeholder's value comes from: ``candidate``, ``input`` or a stage ``output``."""

    kind: str
    name: str = ""

    def __str__(self) -> str:
        return {"candidate": "candidate", "input": f"input.{self.name}"}.get(
            self.kind, f"stages.{self.name}.output")


Binding = tuple[tuple[str, PlaceholderSource], ...]


@dataclass(frozen=True, slots=True)
class Stage:
    """One model or tool call of a workflow; ``inputs`` are its placeholders in first-use order."""

    id: str
    kind: StageKind
    inputs: tuple[str, ...]
    version: int = 1
    model: str = ""
    prompt: str = ""
    sampling: Sampling | None = None
    tool: str = ""
    args: tuple[tuple[str, Scalar], ...] = ()
    read_only: bool = True
    speculable: bool = False
    shared: bool = False
    bind: Binding = ()
    description: str = ""
    #: Chat form (llm stages): ``prompt`` is the user turn of a conversation, ``system`` its
    #: system turn ("" none), rendered in ChatML as every chat front renders a conversation
    #: (``chatml``): a chat, Responses or Messages request with exactly these messages names
    #: the same stage as the fill of it, and may adopt it.
    chat: bool = False
    system: str = ""


@dataclass(frozen=True, slots=True)
class ChainStep:
    """One stage of a candidate subgraph with its complete bindings (stage defaults merged)."""

    stage: str
    bind: Binding


@dataclass(frozen=True, slots=True)
class DecisionPoint:
    """A branch coordinate: the deciding stage, its candidate space and their subgraphs."""

    coordinate: str
    stage: str
    space: CandidateSpace
    semantics: Semantics
    candidates: tuple[str, ...] = ()
    offered: bool = False
    subgraph: tuple[ChainStep, ...] = ()
    per_candidate: tuple[tuple[str, tuple[ChainStep, ...]], ...] = ()
    window: Window = Window.DECODE
    description: str = ""

    def chain_for(self, candidate: str) -> tuple[ChainStep, ...]:
        """The subgraph a candidate runs: its own chain, else the default one."""
        return dict(self.per_candidate).get(candidate, self.subgraph)


@dataclass(frozen=True, slots=True)
class Template:
    """A validated workflow template."""

    id: str
    version: int
    stages: tuple[Stage, ...]
    decisions: tuple[DecisionPoint, ...] = ()
    description: str = ""
    model: str = ""

    def stage(self, stage_id: str) -> Stage:
        """The stage with this id; ``NotFound`` otherwise."""
        found = next((s for s in self.stages if s.id == stage_id), None)
        if found is None:
            raise NotFound(f"template {self.id} has no stage {quoted(stage_id)}")
        return found

    def decision(self, coordinate: str) -> DecisionPoint:
        """The decision point at ``template/stage`` (or a bare stage id); ``NotFound`` otherwise."""
        found = next((d for d in self.decisions if coordinate in (d.coordinate, d.stage)), None)
        if found is None:
            raise NotFound(f"template {self.id} has no decision point {quoted(coordinate)}")
        return found

    def to_dict(self) -> dict[str, Any]:
        """The template as a schema document; ``parse_template(t.to_dict()) == t``."""
        out: dict[str, Any] = {"id": self.id, "version": self.version,
                               "description": self.description, "model": self.model,
                               "stages": [_stage_doc(s) for s in self.stages],
                               "decisions": [_decision_doc(d) for d in self.decisions]}
        return {k: v for k, v in out.items() if v or k in ("id", "version", "stages")}


def placeholders(text: str) -> tuple[str, ...]:
    """Placeholder names in ``text``, first use first; a stray ``{{`` raises ``ValueError``."""
    if "{{" in PLACEHOLDER.sub("", text):
        raise ValueError("has a '{{' that does not open a {{name}} placeholder")
    return tuple(dict.fromkeys(m.group(1) for m in PLACEHOLDER.finditer(text)))


# --- documents -------------------------------------------------------------------------------

def _stage_doc(stage: Stage) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": stage.id, "kind": str(stage.kind), "version": stage.version}
    if stage.kind is StageKind.LLM and stage.sampling is not None:
        s = stage.sampling
        doc |= {"model": stage.model, "prompt": stage.prompt, "sampling": {
            "max_tokens": s.max_tokens, "temperature": s.temperature, "top_p": s.top_p,
            "top_k": s.top_k, "stop": list(s.stop), "ignore_eos": s.ignore_eos,
            **({"seed": s.seed} if s.seed is not None else {})}}
    else:
        doc |= {"tool": stage.tool, "args": dict(stage.args), "read_only": stage.read_only}
    doc |= {"speculable": stage.speculable, "shared": stage.shared,
            "bind": {k: str(v) for k, v in stage.bind}, "description": stage.description}
    if stage.chat:  # only when set: a stage without it documents (and digests) as before
        doc |= {"chat": True, "system": stage.system}
    return doc


def _decision_doc(point: DecisionPoint) -> dict[str, Any]:
    def chain(steps: tuple[ChainStep, ...]) -> list[dict[str, Any]]:
        return [{"stage": s.stage, "bind": {k: str(v) for k, v in s.bind}} for s in steps]

    doc = {"stage": point.stage, "space": str(point.space), "semantics": str(point.semantics),
           "window": str(point.window) if point.window is Window.USER else "",
           "candidates": list(point.candidates), "offered": point.offered,
           "subgraph": chain(point.subgraph), "description": point.description,
           "per_candidate": {c: chain(steps) for c, steps in point.per_candidate}}
    return {k: v for k, v in doc.items() if v or k in ("stage", "space", "semantics")}
