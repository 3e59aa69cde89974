"""Graph checks of a parsed template: output bindings, cycles and what fills may read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NoReturn

from services.common.values.errors import quoted
from services.gateway.templates.model import (
    Binding,
    ChainStep,
    DecisionPoint,
    Template,
    TemplateError,
    Window,
)


def _chains(point: DecisionPoint) -> list[tuple[str, tuple[ChainStep, ...]]]:
    return [("subgraph", point.subgraph)] * bool(point.subgraph) + [
        (f"per_candidate.{c}", chain) for c, chain in point.per_candidate]


def _edges(template: Template) -> dict[str, set[str]]:
    """stage -> the stages that read its output or follow it in a subgraph."""
    out: dict[str, set[str]] = {s.id: set() for s in template.stages}

    def link(bind: Binding, reader: str) -> None:
        for _, src in bind:
            if src.kind == "output" and src.name in out:
                out[src.name].add(reader)

    for stage in template.stages:
        link(stage.bind, stage.id)
    for point in template.decisions:
        for _, chain in _chains(point):
            for prev, step in zip((point.stage, *[s.stage for s in chain]), chain, strict=False):
                out[prev].add(step.stage)
                link(step.bind, step.stage)
    return out


def check_graph(template: Template) -> None:
    """Refuse unknown output bindings, cycles and fills that read what runs after their branch."""
    index = {s.id: i for i, s in enumerate(template.stages)}
    for stage in template.stages:
        for name, src in stage.bind:
            if src.kind == "output" and src.name not in index:
                _fail(template, f"stages[{index[stage.id]}].bind.{name}",
                      f"unknown stage {quoted(src.name)}")
    edges = _edges(template)
    cycle = _find_cycle(edges)
    if cycle:
        _fail(template, f"stages[{index[cycle[0]]}]", "cycle " + " -> ".join(cycle))
    for i, point in enumerate(template.decisions):
        after = _reachable(edges, point.stage) - {point.stage}
        decider = point.stage if point.window is Window.DECODE else ""
        for label, chain in _chains(point):
            for j in range(len(chain)):
                where, why = _step_fault(decider, chain, j, after, index)
                if why:
                    _fail(template, f"decisions[{i}].{label}[{j}]{where}", why)


def _fail(template: Template, path: str, message: str) -> NoReturn:
    raise TemplateError(template.id, path, message)


def _step_fault(decider: str, chain: tuple[ChainStep, ...], j: int, after: set[str],
                index: Mapping[str, int]) -> tuple[str, str]:
    """(path suffix, reason) when step ``j`` of a chain cannot run as a fill, else ("", "")."""
    earlier = {s.stage for s in chain[:j]}
    for name, src in chain[j].bind:
        if src.kind != "output" or src.name in earlier:
            continue
        if src.name not in index:
            return f".bind.{name}", f"unknown stage {quoted(src.name)}"
        if src.name == decider:
            return f".bind.{name}", (f"stages.{decider}.output is what the branch decides; "
                                     "bind 'candidate' instead")
        if src.name in after:
            return f".bind.{name}", f"stage {quoted(src.name)} runs after the branch resolves"
    return "", ""


def _find_cycle(edges: Mapping[str, set[str]]) -> list[str]:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return []

    return next((c for n in edges if n not in state and (c := visit(n))), [])


def _reachable(edges: Mapping[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in edges[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


__all__ = ["check_graph"]
