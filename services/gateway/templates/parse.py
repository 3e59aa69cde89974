"""Parsing and validation of template documents into frozen ``Template`` values.

Every fault names the template and the path inside it (``template t: stages[2].sampling...``);
unknown keys, unknown stages, cycles and unbound placeholders are refused. The schema is in
``services/gateway/templates/model.py``.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, NoReturn

from services.common.values.errors import quoted
from services.common.values.generation import Sampling
from services.gateway.templates.graph import check_graph
from services.gateway.templates.model import (
    Binding,
    CandidateSpace,
    ChainStep,
    DecisionPoint,
    PlaceholderSource,
    Scalar,
    Semantics,
    Stage,
    StageKind,
    Template,
    TemplateError,
    Window,
    placeholders,
)
from services.gateway.tools.base import BUILTIN_TOOLS

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_SOURCE = re.compile(r"candidate|input\.([A-Za-z_][A-Za-z0-9_]*)|stages\.([^./\s]+)\.output")
_I32, _U32, _U64 = 2**31 - 1, 2**32 - 1, 2**64 - 1
#: Stages of one template at most (decisions: one per stage; a chain: each stage once).
MAX_STAGES = 256
#: Listed candidates of one decision at most (as many as a demand may offer).
MAX_CANDIDATES = 256
#: Stop strings of a stage and characters of each, at most: the wire's bounds on a demand
#: (``services/common/runtime/convert.py``), so a fill rendered from a stage is never refused.
MAX_STOP_STRINGS, MAX_STOP_CHARS = 16, 256

class _At:
    """A value at a path inside one template document; failures name template and path."""

    __slots__ = ("path", "tid", "value")

    def __init__(self, tid: str, path: str, value: Any) -> None:
        self.tid, self.path, self.value = tid, path, value

    def fail(self, message: str) -> NoReturn:
        raise TemplateError(self.tid, self.path or "<root>", message)

    def at(self, key: Any) -> _At:
        path = (f"{self.path}[{key}]" if isinstance(key, int)
                else (f"{self.path}.{key}" if self.path else str(key)))
        value = self.value.get(key) if isinstance(self.value, Mapping) else self.value[key]
        return _At(self.tid, path, value)

    def keys(self, required: Sequence[str], optional: Sequence[str] = ()) -> None:
        """Check the mapping here has every required key and no unknown one."""
        if not isinstance(self.value, Mapping):
            self.fail("must be a mapping")
        for key in self.value:
            if key not in (*required, *optional):
                self.at(key).fail("unknown key")
        for key in required:
            if key not in self.value:
                self.at(key).fail("required")

    def items(self, limit: int | None = None) -> list[_At]:
        if not isinstance(self.value, list):
            self.fail("must be a list")
        if limit is not None and len(self.value) > limit:
            self.fail(f"at most {limit} entries, got {len(self.value)}")
        return [self.at(i) for i in range(len(self.value))]

    def text(self, pattern: re.Pattern[str] | None = None) -> str:
        if not isinstance(self.value, str) or not self.value:
            self.fail("must be a non-empty string")
        if pattern is not None and not pattern.fullmatch(self.value):
            self.fail(f"{quoted(self.value)} must match {pattern.pattern}")
        return self.value

    def note(self) -> str:
        if not isinstance(self.value, str):
            self.fail("must be a string")
        return self.value

    def integer(self, lo: int, hi: int) -> int:
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            self.fail("must be an integer")
        if not lo <= self.value <= hi:
            self.fail(f"must be >= {lo}" if self.value < lo else f"must be <= {hi}")
        return int(self.value)

    def number(self, lo: float, hi: float = math.inf, lo_open: bool = False) -> float:
        if isinstance(self.value, bool) or not isinstance(self.value, int | float):
            self.fail("must be a number")
        value = float(self.value)
        if not math.isfinite(value):
            self.fail("must be a finite number")
        if value < lo or (lo_open and value == lo):
            self.fail(f"must be {'>' if lo_open else '>='} {lo:g}")
        if value > hi:
            self.fail(f"must be <= {hi:g}")
        return float(struct.unpack("<f", struct.pack("<f", value))[0])

    def flag(self) -> bool:
        if not isinstance(self.value, bool):
            self.fail("must be true or false")
        return self.value

    def opt(self, key: str, read: Any, default: Any) -> Any:
        return read(self.at(key)) if key in self.value else default


def parse_template(data: Mapping[str, Any]) -> Template:
    """Validate a template document (parsed YAML or the gRPC dict) into a frozen ``Template``."""
    tid = data.get("id") if isinstance(data, Mapping) else None
    root = _At(tid if isinstance(tid, str) and _ID.fullmatch(tid) else "?", "", data)
    root.keys(("id", "version", "stages"), ("description", "model", "decisions"))
    tid = root.at("id").text(_ID)
    model = root.opt("model", _At.text, "")
    stages = tuple(_parse_stage(n, model) for n in root.at("stages").items(MAX_STAGES))
    if not stages:
        root.at("stages").fail("must list at least one stage")
    _unique([s.id for s in stages], root.at("stages"), "stage id")
    by_id = {s.id: s for s in stages}
    decisions = tuple(_parse_decision(n, tid, by_id)
                      for n in root.opt("decisions", lambda n: n.items(MAX_STAGES), []))
    _unique([d.stage for d in decisions], root.at("decisions"), "decision stage")
    template = Template(tid, root.at("version").integer(1, _U32), stages, decisions,
                        root.opt("description", _At.note, ""), model)
    check_graph(template)
    return template


def _unique(values: Sequence[str], node: _At, what: str) -> None:
    seen: set[str] = set()
    for i, value in enumerate(values):
        if value in seen:
            node.at(i).fail(f"duplicate {what} {quoted(value)}")
        seen.add(value)


_COMMON = ("version", "speculable", "shared", "bind", "description")


def _parse_stage(node: _At, default_model: str) -> Stage:
    if not isinstance(node.value, Mapping):
        node.fail("must be a mapping")
    kind = node.at("kind").value
    if kind not in ("llm", "tool"):
        node.at("kind").fail("required: 'llm' or 'tool'")
    if kind == "llm":
        node.keys(("id", "kind", "prompt", "sampling"), ("model", "chat", "system", *_COMMON))
    else:
        node.keys(("id", "kind", "tool"), ("args", "read_only", *_COMMON))
    stage = _llm_stage(node, default_model) if kind == "llm" else _tool_stage(node)
    stage = replace(stage, id=node.at("id").text(_ID), shared=node.opt("shared", _At.flag, False),
                    version=node.opt("version", lambda n: n.integer(0, _U32), 1),
                    speculable=node.opt("speculable", _At.flag, False),
                    bind=node.opt("bind", _parse_bind, ()),
                    description=node.opt("description", _At.note, ""))
    for name, _ in stage.bind:
        if name not in stage.inputs:
            node.at("bind").at(name).fail(f"stage {stage.id} has no placeholder {_ph(name)}")
    if stage.speculable and not _safe_twice(stage):
        node.at("speculable").fail("only greedy or seeded llm stages and read-only tool stages "
                                   "may be speculable")
    return stage


def _llm_stage(node: _At, default_model: str) -> Stage:
    prompt = node.at("prompt").text()
    chat = node.opt("chat", _At.flag, False)
    system = node.opt("system", _At.text, "")
    if system and not chat:
        node.at("system").fail("only a stage in chat form (chat: true) has a system turn")
    inputs: tuple[str, ...] = ()
    for key, text in (("system", system), ("prompt", prompt)):
        try:
            inputs += placeholders(text)
        except ValueError as exc:
            node.at(key).fail(str(exc))
    model = node.opt("model", _At.text, default_model)
    if not model:
        node.at("model").fail("required (here or as the template's default model)")
    return Stage("", StageKind.LLM, tuple(dict.fromkeys(inputs)), model=model, prompt=prompt,
                 sampling=_parse_sampling(node.at("sampling")), chat=chat, system=system)


def _tool_stage(node: _At) -> Stage:
    tool = node.at("tool").text(_ID)
    args = node.opt("args", _parse_args, ())
    inputs: list[str] = []
    for key, value in args:
        try:
            inputs.extend(placeholders(value) if isinstance(value, str) else ())
        except ValueError as exc:
            node.at("args").at(key).fail(str(exc))
    builtin = BUILTIN_TOOLS.get(tool)
    read_only = node.opt("read_only", _At.flag, builtin is not None and builtin.read_only)
    if builtin is not None and read_only and not builtin.read_only:
        node.at("read_only").fail(f"builtin tool {quoted(tool)} writes records")
    return Stage("", StageKind.TOOL, tuple(dict.fromkeys(inputs)), tool=tool, args=args,
                 read_only=read_only)


def _parse_sampling(node: _At) -> Sampling:
    node.keys(("max_tokens",), ("temperature", "top_p", "top_k", "seed", "stop", "ignore_eos"))
    return Sampling(max_tokens=node.at("max_tokens").integer(1, _I32),
                    temperature=node.opt("temperature", lambda n: n.number(0.0), 0.0),
                    top_p=node.opt("top_p", lambda n: n.number(0.0, 1.0, lo_open=True), 1.0),
                    top_k=node.opt("top_k", lambda n: n.integer(0, _I32), 0),
                    seed=node.opt("seed", lambda n: n.integer(0, _U64), None),
                    stop=node.opt("stop", _parse_stop, ()),
                    ignore_eos=node.opt("ignore_eos", _At.flag, False))


def _parse_stop(node: _At) -> tuple[str, ...]:
    stop = tuple(n.text() for n in node.items(MAX_STOP_STRINGS))
    for i, text in enumerate(stop):
        if len(text) > MAX_STOP_CHARS:
            node.at(i).fail(f"at most {MAX_STOP_CHARS} characters, got {len(text)}")
    return stop


def _mapping(node: _At) -> Mapping[str, Any]:
    if not isinstance(node.value, Mapping) or not all(isinstance(k, str) for k in node.value):
        node.fail("must be a mapping with string keys")
    return node.value


def _parse_args(node: _At) -> tuple[tuple[str, Scalar], ...]:
    for key, value in _mapping(node).items():
        if (not isinstance(value, str | int | float | bool | None)
                or (isinstance(value, float) and not math.isfinite(value))):
            node.at(key).fail("must be a string, a finite number, a boolean or null")
    return tuple(sorted(node.value.items()))


def _parse_bind(node: _At) -> Binding:
    return tuple((k, _parse_source(node.at(k))) for k in sorted(_mapping(node)))


def _parse_source(node: _At) -> PlaceholderSource:
    match = _SOURCE.fullmatch(node.text())
    if match is None:
        node.fail("must be 'candidate', 'input.<name>' or 'stages.<id>.output'")
    if match.group(1):
        return PlaceholderSource("input", match.group(1))
    if match.group(2):
        return PlaceholderSource("output", match.group(2))
    return PlaceholderSource("candidate")


def _parse_decision(node: _At, tid: str, by_id: Mapping[str, Stage]) -> DecisionPoint:
    node.keys(("stage", "space", "semantics"),
              ("candidates", "offered", "subgraph", "per_candidate", "window", "description"))
    stage = node.at("stage").text()
    if stage not in by_id:
        node.at("stage").fail(f"unknown stage {quoted(stage)}")
    space, semantics = node.at("space").value, node.at("semantics").value
    if space not in ("bounded", "open"):
        node.at("space").fail("must be 'bounded' or 'open'")
    if semantics not in ("exclusive", "independent"):
        node.at("semantics").fail("must be 'exclusive' or 'independent'")
    window = node.opt("window", _At.note, "decode")
    if window not in ("decode", "user"):
        node.at("window").fail("must be 'decode' or 'user'")
    candidates = tuple(n.text() for n in node.opt("candidates",
                                                  lambda n: n.items(MAX_CANDIDATES), []))
    _unique(list(candidates), node.at("candidates"), "candidate")
    offered = node.opt("offered", _At.flag, False)
    if space == "open" and (candidates or offered):
        node.at("space").fail("an open space lists no candidates and offers none")
    if space == "bounded" and bool(candidates) == offered:
        node.fail("a bounded space needs either a candidate list or offered: true")
    subgraph = node.opt("subgraph", lambda n: _parse_chain(n, by_id), ())
    overrides = node.opt("per_candidate", lambda n: _parse_overrides(n, by_id, candidates), ())
    chains = [("subgraph", subgraph)] + [(f"per_candidate.{c}", ch) for c, ch in overrides]
    for label, chain in chains:
        for j, step in enumerate(chain):
            if step.stage == stage:
                _At(tid, f"{node.path}.{label}[{j}]", None).fail(
                    "a decision's subgraph cannot contain its deciding stage")
    lacking = [c for c in candidates if c not in dict(overrides)]
    if not subgraph and (lacking or not candidates):
        node.at("subgraph").fail("required: a chain of one or more stages"
                                 + (f" (no chain for {quoted(lacking[0])})" if lacking else ""))
    return DecisionPoint(f"{tid}/{stage}", stage, CandidateSpace(space), Semantics(semantics),
                         candidates, offered, subgraph, overrides, Window(window),
                         node.opt("description", _At.note, ""))


def _parse_overrides(node: _At, by_id: Mapping[str, Stage], candidates: tuple[str, ...]
                     ) -> tuple[tuple[str, tuple[ChainStep, ...]], ...]:
    node.keys((), candidates)
    return tuple((c, _parse_chain(node.at(c), by_id)) for c in candidates if c in node.value)


def _parse_chain(node: _At, by_id: Mapping[str, Stage]) -> tuple[ChainStep, ...]:
    chain = tuple(_parse_step(step, by_id) for step in node.items(MAX_STAGES))
    if not chain:
        node.fail("a subgraph is a chain of one or more stages")
    _unique([s.stage for s in chain], node, "stage in a chain")
    return chain


def _parse_step(node: _At, by_id: Mapping[str, Stage]) -> ChainStep:
    if isinstance(node.value, str):
        node = _At(node.tid, node.path, {"stage": node.value})
    node.keys(("stage",), ("bind",))
    stage = by_id.get(node.at("stage").text())
    if stage is None:
        node.at("stage").fail(f"unknown stage {quoted(node.at('stage').value)}")
    bind = dict(stage.bind) | dict(node.opt("bind", _parse_bind, ()))
    for name in bind:
        if name not in stage.inputs:
            node.at("bind").at(name).fail(f"stage {stage.id} has no placeholder {_ph(name)}")
    for name in stage.inputs:
        if name not in bind:
            node.fail(f"placeholder {_ph(name)} of stage {stage.id} is not bound")
    return ChainStep(stage.id, tuple(sorted(bind.items())))


def _ph(name: str) -> str:
    return "{{" + name + "}}"


def _safe_twice(stage: Stage) -> bool:
    if stage.kind is StageKind.TOOL:
        return stage.read_only
    return stage.sampling is not None and stage.sampling.deterministic


__all__ = ["MAX_CANDIDATES", "MAX_STAGES", "MAX_STOP_CHARS", "MAX_STOP_STRINGS", "parse_template"]
