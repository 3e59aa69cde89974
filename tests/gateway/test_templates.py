"""Workflow templates: schema validation with fault paths, shipped templates, the registry."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from services.common.values.errors import (
    MAX_QUOTED,
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PayloadTooLarge,
)
from services.gateway.templates import (
    MAX_TEMPLATE_BYTES,
    MAX_TEMPLATE_DEPTH,
    MAX_TEMPLATE_NODES,
    CandidateSpace,
    Semantics,
    StageKind,
    TemplateError,
    TemplateRegistry,
    Window,
    builtin_names,
    load_builtin,
    load_template,
    parse_template,
    parse_template_yaml,
)
from services.gateway.templates.parse import (
    MAX_CANDIDATES,
    MAX_STAGES,
    MAX_STOP_CHARS,
    MAX_STOP_STRINGS,
)


def llm(stage_id: str, prompt: str, **kw: Any) -> dict[str, Any]:
    """A valid greedy llm stage document."""
    return {"id": stage_id, "kind": "llm", "prompt": prompt, "sampling": {"max_tokens": 16},
            "speculable": True, **kw}


def doc(**kw: Any) -> dict[str, Any]:
    """A valid template document: router -> handler -> executor, bounded by a fixed list."""
    base = {
        "id": "t", "version": 1, "model": "m",
        "stages": [
            llm("router", "route {{query}}", bind={"query": "input.query"}),
            llm("handler", "do {{function}} for {{query}}", bind={"query": "input.query"}),
            llm("executor", "run {{call}}", bind={"call": "stages.handler.output"}),
        ],
        "decisions": [{
            "stage": "router", "space": "bounded", "candidates": ["a", "b"],
            "semantics": "exclusive",
            "subgraph": [{"stage": "handler", "bind": {"function": "candidate"}}, "executor"],
        }],
    }
    base.update(kw)
    return base


def fault(document: dict[str, Any]) -> str:
    """The validation message of an invalid document."""
    with pytest.raises(TemplateError) as err:
        parse_template(document)
    return str(err.value)


def mutated(change: Any) -> dict[str, Any]:
    document = copy.deepcopy(doc())
    change(document)
    return document


# --- shipped templates -----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["routing", "react", "subagent", "hci"])
def test_builtin_template_loads_and_round_trips_through_its_dict(name: str) -> None:
    template = load_builtin(name)
    assert template.id == name and template.version >= 1
    assert parse_template(template.to_dict()) == template


def test_builtin_templates_cover_the_four_workload_shapes() -> None:
    assert set(builtin_names()) >= {"routing", "react", "subagent", "hci"}
    shapes = {n: load_builtin(n).decisions[0] for n in ("routing", "react", "subagent", "hci")}
    assert shapes["routing"].coordinate == "routing/router" and shapes["routing"].offered
    assert shapes["react"].space is CandidateSpace.OPEN
    assert [s.stage for s in shapes["react"].subgraph] == ["retrieve", "read"]
    assert [s.stage for s in shapes["subagent"].subgraph] == ["retrieve", "read"]
    assert shapes["hci"].semantics is Semantics.INDEPENDENT
    assert shapes["hci"].window is Window.USER
    assert load_builtin("react").stage("retrieve").kind is StageKind.TOOL


def test_every_builtin_subgraph_stage_is_speculable() -> None:
    for name in builtin_names():
        template = load_builtin(name)
        for point in template.decisions:
            assert all(template.stage(s.stage).speculable for s in point.subgraph)


def test_unknown_builtin_is_not_found() -> None:
    with pytest.raises(NotFound, match="routing"):
        load_builtin("nope")


# --- validation ------------------------------------------------------------------------------

def test_valid_document_parses_into_frozen_values() -> None:
    template = parse_template(doc())
    assert template.decision("t/router").chain_for("a")[1].stage == "executor"
    with pytest.raises(dataclasses.FrozenInstanceError):
        template.version = 2  # type: ignore[misc]


def test_fault_names_template_and_path() -> None:
    document = mutated(lambda d: d["stages"][2]["sampling"].update(temperature=-1))
    assert fault(document) == "template t: stages[2].sampling.temperature: must be >= 0"


def test_template_error_is_an_invalid_argument() -> None:
    with pytest.raises(InvalidArgument):
        parse_template(mutated(lambda d: d.update(version=0)))


@pytest.mark.parametrize("change, path", [
    (lambda d: d.update(extra=1), "extra"),
    (lambda d: d["stages"][0].update(colour=1), "stages[0].colour"),
    (lambda d: d["stages"][0]["sampling"].update(temp=1), "stages[0].sampling.temp"),
    (lambda d: d["decisions"][0].update(weight=1), "decisions[0].weight"),
    (lambda d: d["decisions"][0]["subgraph"][0].update(x=1), "decisions[0].subgraph[0].x"),
])
def test_unknown_keys_are_refused_at_every_level(change: Any, path: str) -> None:
    assert fault(mutated(change)) == f"template t: {path}: unknown key"


@pytest.mark.parametrize("change, expected", [
    (lambda d: d["decisions"][0].update(stage="nope"), "decisions[0].stage: unknown stage"),
    (lambda d: d["decisions"][0]["subgraph"].append("nope"),
     "decisions[0].subgraph[2].stage: unknown stage"),
    (lambda d: d["stages"][2]["bind"].update(call="stages.nope.output"),
     "stages[2].bind.call: unknown stage"),
])
def test_references_to_unknown_stages_are_refused(change: Any, expected: str) -> None:
    assert expected in fault(mutated(change))


def test_cycles_are_refused() -> None:
    document = mutated(lambda d: d["stages"][1]["bind"].update(query="stages.executor.output"))
    assert "cycle handler -> executor -> handler" in fault(document)


def test_sampled_stage_without_seed_cannot_be_speculable() -> None:
    document = mutated(lambda d: d["stages"][0]["sampling"].update(temperature=0.7))
    assert fault(document).startswith("template t: stages[0].speculable: only greedy or seeded")
    document["stages"][0]["sampling"]["seed"] = 7
    assert parse_template(document).stages[0].sampling.seed == 7


def test_writing_tool_cannot_be_speculable() -> None:
    stage = {"id": "w", "kind": "tool", "tool": "post_comment", "args": {"body": "{{x}}"},
             "speculable": True}
    assert "stages[3].speculable" in fault(mutated(lambda d: d["stages"].append(stage)))
    stage["read_only"] = True
    assert parse_template(mutated(lambda d: d["stages"].append(stage))).stages[3].read_only


def test_builtin_retrieve_is_read_only_without_saying_so() -> None:
    stage = {"id": "r", "kind": "tool", "tool": "retrieve", "args": {"query": "{{q}}", "k": 3},
             "speculable": True}
    parsed = parse_template(mutated(lambda d: d["stages"].append(stage))).stage("r")
    assert parsed.read_only and parsed.inputs == ("q",) and dict(parsed.args)["k"] == 3


def test_subgraph_cannot_read_the_deciding_stage_during_its_decode() -> None:
    document = mutated(lambda d: d["decisions"][0]["subgraph"][0]["bind"].update(
        function="stages.router.output"))
    assert "decisions[0].subgraph[0].bind.function: stages.router.output is what the branch " \
           "decides" in fault(document)
    document["decisions"][0]["window"] = "user"
    assert parse_template(document).decisions[0].window is Window.USER


def test_subgraph_step_reading_a_later_step_is_a_cycle() -> None:
    document = mutated(lambda d: d["decisions"][0]["subgraph"].reverse())
    assert "cycle executor -> handler -> executor" in fault(document)


def test_subgraph_must_bind_every_placeholder() -> None:
    document = mutated(lambda d: d["decisions"][0]["subgraph"].__setitem__(0, "handler"))
    assert fault(document) == ("template t: decisions[0].subgraph[0]: placeholder {{function}} "
                               "of stage handler is not bound")


def test_subgraph_cannot_contain_its_deciding_stage() -> None:
    document = mutated(lambda d: d["decisions"][0]["subgraph"].append("router"))
    assert "decisions[0].subgraph[2]: a decision's subgraph cannot contain" in fault(document)


def test_binding_a_name_the_stage_does_not_use_is_refused() -> None:
    document = mutated(lambda d: d["stages"][0]["bind"].update(other="input.x"))
    assert "stages[0].bind.other: stage router has no placeholder {{other}}" in fault(document)


@pytest.mark.parametrize("decision, expected", [
    ({"candidates": [], "offered": False}, "a bounded space needs either"),
    ({"candidates": ["a"], "offered": True}, "a bounded space needs either"),
    ({"space": "open"}, "an open space lists no candidates"),
    ({"candidates": ["a", "a"]}, "duplicate candidate"),
    ({"semantics": "maybe"}, "must be 'exclusive' or 'independent'"),
])
def test_candidate_space_rules(decision: dict[str, Any], expected: str) -> None:
    assert expected in fault(mutated(lambda d: d["decisions"][0].update(decision)))


def test_per_candidate_chains_override_the_default() -> None:
    document = mutated(lambda d: d["decisions"][0].update(per_candidate={
        "b": [{"stage": "handler", "bind": {"function": "input.special"}}]}))
    point = parse_template(document).decisions[0]
    assert [s.stage for s in point.chain_for("a")] == ["handler", "executor"]
    assert [s.stage for s in point.chain_for("b")] == ["handler"]
    document["decisions"][0]["per_candidate"]["zzz"] = ["handler"]
    assert "per_candidate.zzz: unknown key" in fault(document)


def test_stray_braces_in_a_prompt_are_refused() -> None:
    document = mutated(lambda d: d["stages"][0].update(prompt="route {{query}} {{ bad-name }}"))
    assert "stages[0].prompt: has a '{{' that does not open" in fault(document)


def test_sampling_floats_are_rounded_to_the_wire_width() -> None:
    document = mutated(lambda d: d["stages"][0]["sampling"].update(temperature=0.7, seed=1))
    assert parse_template(document).stages[0].sampling.temperature == pytest.approx(0.7, abs=1e-7)
    assert parse_template(document).stages[0].sampling.temperature != 0.7  # binary32 value


def test_llm_stage_needs_a_model() -> None:
    document = mutated(lambda d: d.pop("model"))
    assert fault(document) == ("template t: stages[0].model: required (here or as the "
                               "template's default model)")


def test_yaml_duplicate_keys_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("id: t\nid: u\nversion: 1\nstages: []\n")
    with pytest.raises(TemplateError, match="duplicate key 'id'"):
        load_template(path)


# --- bounds (issue 38): every oversized or hostile document is refused by field, quickly ------

def nested(depth: int) -> str:
    """A valid document but for its ``description``: flow lists nested to ``depth`` nodes in
    all (the root mapping is the first)."""
    return yaml.safe_dump({k: v for k, v in doc().items() if k != "description"}) + (
        "description: " + "[" * (depth - 1) + "]" * (depth - 1) + "\n")


def test_yaml_nested_past_the_depth_limit_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidArgument) as deep:
        parse_template_yaml(nested(MAX_TEMPLATE_DEPTH + 1))
    with pytest.raises(InvalidArgument) as very_deep:  # a RecursionError (INTERNAL) before
        parse_template_yaml("a: " + "{b: " * 5000 + "1" + "}" * 5000)
    with pytest.raises(TemplateError, match="t: description: must be a string"):
        parse_template_yaml(nested(MAX_TEMPLATE_DEPTH))  # at the limit: parsed, then refused
    assert deep.value.field == very_deep.value.field == "yaml"
    assert f"nested deeper than {MAX_TEMPLATE_DEPTH} levels" in str(very_deep.value)


def test_a_shipped_template_fits_the_depth_limit_with_room() -> None:
    text = (Path(__file__).parents[2] / "services/gateway/templates/workflows/routing.yaml")
    assert parse_template_yaml(text.read_text()) == load_builtin("routing")


def test_a_document_of_too_many_nodes_is_refused_before_it_is_all_parsed() -> None:
    with pytest.raises(InvalidArgument) as items:  # 65,000 nodes took 6 s to parse
        parse_template_yaml("description:\n" + "- a\n" * (MAX_TEMPLATE_NODES + 1))
    assert str(items.value).startswith(f"yaml: more than {MAX_TEMPLATE_NODES} YAML nodes")
    keys = "".join(f"k{i}: 1\n" for i in range(MAX_TEMPLATE_NODES // 2 - 2)) + "k7: 2\n"
    with pytest.raises(InvalidArgument, match="duplicate key 'k7'"):  # found in linear time
        parse_template_yaml(keys)


def test_registration_text_is_bounded_in_bytes_and_refuses_duplicate_keys() -> None:
    with pytest.raises(PayloadTooLarge, match="yaml: larger than"):
        parse_template_yaml("description: " + "é" * (MAX_TEMPLATE_BYTES // 2))
    with pytest.raises(InvalidArgument, match="duplicate key 'id'"):
        parse_template_yaml(yaml.safe_dump(doc()) + "id: u\n")
    with pytest.raises(InvalidArgument, match="yaml: must be a mapping"):
        parse_template_yaml("- a\n")


@pytest.mark.parametrize("change, expected", [
    (lambda d: d.update(stages=[llm(f"s{i}", "p") for i in range(MAX_STAGES + 1)]),
     f"stages: at most {MAX_STAGES} entries, got {MAX_STAGES + 1}"),
    (lambda d: d["decisions"][0].update(candidates=[f"c{i}" for i in range(MAX_CANDIDATES + 1)]),
     f"decisions[0].candidates: at most {MAX_CANDIDATES} entries"),
    (lambda d: d["stages"][0]["sampling"].update(stop=["x"] * (MAX_STOP_STRINGS + 1)),
     f"stages[0].sampling.stop: at most {MAX_STOP_STRINGS} entries"),
    (lambda d: d["stages"][0]["sampling"].update(stop=["x" * (MAX_STOP_CHARS + 1)]),
     f"stages[0].sampling.stop[0]: at most {MAX_STOP_CHARS} characters"),
])
def test_counts_past_their_limits_are_refused_by_field(change: Any, expected: str) -> None:
    assert expected in fault(mutated(change))


def test_a_long_chain_of_stages_is_refused_without_recursing_into_it() -> None:
    stages = [llm("s0", "p")] + [llm(f"s{i}", "{{x}}", bind={"x": f"stages.s{i - 1}.output"})
                                 for i in range(1, 2000)]
    assert f"stages: at most {MAX_STAGES} entries" in fault(mutated(lambda d: d.update(
        stages=stages, decisions=[])))
    cycle = [llm(f"s{i}", "{{x}}", bind={"x": f"stages.s{(i + 1) % MAX_STAGES}.output"})
             for i in range(MAX_STAGES)]  # at the limit the graph check still runs
    message = fault(mutated(lambda d: d.update(stages=cycle, decisions=[])))
    assert message.startswith("template t: stages[0]: cycle s0 -> ") and message.endswith(" s0")


def test_messages_quote_a_bounded_prefix_of_an_offending_value() -> None:
    huge = "!" * 100_000
    message = fault(mutated(lambda d: d.update(id=huge)))
    assert message.startswith("template ?: id: '!!!") and "(100002 characters)" in message
    assert len(message) < 2 * MAX_QUOTED + 100
    unknown = fault(mutated(lambda d: d["decisions"][0].update(stage=huge)))
    assert len(unknown) < 2 * MAX_QUOTED + 100


def test_missing_template_file_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        load_template(tmp_path / "absent.yaml")


# --- registry --------------------------------------------------------------------------------

def test_registry_registers_identical_bodies_idempotently() -> None:
    registry = TemplateRegistry()
    first = registry.register(parse_template(doc()))
    assert registry.register(parse_template(doc())) is first
    assert registry.get("t") is first and registry.ids() == ("t",)


def test_registry_refuses_a_changed_body_at_the_same_version() -> None:
    registry = TemplateRegistry()
    registry.register(parse_template(doc()))
    with pytest.raises(AlreadyExists, match="higher version"):
        registry.register(parse_template(doc(description="changed")))


def test_registry_accepts_a_higher_version_and_keeps_the_old_one() -> None:
    registry = TemplateRegistry()
    registry.register(parse_template(doc()))
    registry.register(parse_template(doc(version=2, description="changed")))
    assert registry.get("t").version == 2 and registry.get("t", 1).description == ""
    assert registry.decision("t/router").coordinate == "t/router"


def test_registry_refuses_an_older_version() -> None:
    registry = TemplateRegistry()
    registry.register(parse_template(doc(version=3)))
    with pytest.raises(FailedPrecondition, match="older"):
        registry.register(parse_template(doc(version=2)))


def test_registry_lookups_of_unknown_ids_are_not_found() -> None:
    registry = TemplateRegistry()
    with pytest.raises(NotFound):
        registry.get("t")
    registry.register(parse_template(doc()))
    with pytest.raises(NotFound):
        registry.decision("t/handler")
