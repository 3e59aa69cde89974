"""Rendering: strict, single-pass substitution; fills and canonical demands render identically."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.values.errors import InvalidArgument, NotFound
from services.common.values.reuse_name import StageFingerprint, reuse_name
from services.gateway.templates import StageKind, Template, load_builtin, parse_template
from services.gateway.templates.render import (
    render_candidate_stage,
    render_stage,
    render_text,
    resolve_bindings,
)

ROUTING_INPUTS = {"functions": '[{"name": "get_weather"}, {"name": "book_flight"}]',
                  "query": "Is it raining in Paris?"}
texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)


def one_stage(prompt: str = "", args: dict[str, Any] | None = None) -> Template:
    """A template with one llm stage (``prompt``) or one tool stage (``args``)."""
    stage: dict[str, Any] = {"id": "s", "kind": "llm", "prompt": prompt,
                             "sampling": {"max_tokens": 8}}
    if args is not None:
        stage = {"id": "s", "kind": "tool", "tool": "retrieve", "args": args}
    return parse_template({"id": "t", "version": 1, "model": "m", "stages": [stage]})


def name_of(rendered: Any, tenant: str = "tenant-a") -> str:
    return reuse_name(tenant, StageFingerprint(**rendered.fingerprint_fields()), rendered.input,
                      shared=rendered.shared).digest


def test_llm_stage_renders_prompt_model_and_sampling() -> None:
    rendered = render_stage(one_stage("Q: {{ q }} / {{q}}!"), "s", {"q": "why"})
    assert rendered.input == b"Q: why / why!" and rendered.text == "Q: why / why!"
    assert rendered.kind is StageKind.LLM and rendered.model == "m"
    assert rendered.sampling is not None and rendered.sampling.max_tokens == 8


def test_missing_binding_names_the_variable() -> None:
    with pytest.raises(InvalidArgument) as err:
        render_stage(one_stage("{{a}} {{b}}"), "s", {"a": "x"})
    assert err.value.field == "bindings.b" and "t/s uses {{b}}" in str(err.value)


def test_binding_that_is_no_placeholder_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="bindings.c"):
        render_stage(one_stage("{{a}}"), "s", {"a": "x", "c": "y"})


def test_non_string_binding_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="bindings.a: must be a string"):
        render_stage(one_stage("{{a}}"), "s", {"a": 3})  # type: ignore[dict-item]


def test_unknown_stage_is_not_found() -> None:
    with pytest.raises(NotFound):
        render_stage(one_stage("x"), "nope", {})


def test_values_are_inserted_verbatim_and_never_rescanned() -> None:
    rendered = render_stage(one_stage("[{{a}}] [{{b}}]"), "s", {"a": "{{b}}", "b": r"\1 $x"})
    assert rendered.text == r"[{{b}}] [\1 $x]"


def test_tool_stage_renders_canonical_json_arguments() -> None:
    rendered = render_stage(one_stage(args={"query": "about {{e}}", "k": 3}), "s",
                            {"e": 'Zoë "Z"'})
    assert rendered.input == '{"k":3,"query":"about Zoë \\"Z\\""}'.encode()
    assert rendered.model == "tool:retrieve" and rendered.tool == "retrieve"
    assert rendered.sampling is None and rendered.fingerprint_fields()["model"] == "tool:retrieve"


def test_lone_surrogate_in_a_value_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="UTF-8"):
        render_stage(one_stage("{{a}}"), "s", {"a": "\ud800"})


def test_fill_renders_byte_identical_to_the_canonical_demand() -> None:
    template = load_builtin("routing")
    outputs = {"handler": '{"city": "Paris"}'}
    for stage_id in ("handler", "executor"):
        fill = render_candidate_stage(template, "routing/router", "get_weather", stage_id,
                                      inputs=ROUTING_INPUTS, outputs=outputs)
        canonical_values = {"handler": {**ROUTING_INPUTS, "function": "get_weather"},
                            "executor": {"query": ROUTING_INPUTS["query"],
                                         "function": "get_weather",
                                         "arguments": outputs["handler"]}}[stage_id]
        canonical = render_stage(template, stage_id, canonical_values)
        assert fill == canonical and name_of(fill) == name_of(canonical)


def test_wrong_candidate_renders_a_different_reuse_name() -> None:
    template = load_builtin("routing")
    names = {name_of(render_candidate_stage(template, "routing/router", c, "handler",
                                            inputs=ROUTING_INPUTS, outputs={}))
             for c in ("get_weather", "book_flight")}
    assert len(names) == 2


def test_shared_stage_names_agree_across_tenants() -> None:
    rendered = render_candidate_stage(load_builtin("react"), "react/think", "Neil Peart",
                                      "retrieve", inputs={}, outputs={})
    assert rendered.shared and name_of(rendered, "a") == name_of(rendered, "b")


def test_user_window_fill_binds_the_offer_output() -> None:
    values = {"service": "Restaurants_2", "dialogue": "User: a table for two"}
    rendered = render_candidate_stage(load_builtin("hci"), "hci/offer", "Bazille", "fulfil",
                                      inputs=values, outputs={"offer": "Bazille or Tanpopo?"})
    assert "Assistant: Bazille or Tanpopo?\nThe user picked: Bazille" in rendered.text


@pytest.mark.parametrize("kwargs, field", [
    ({"inputs": {}, "outputs": {}}, "inputs.functions"),
    ({"inputs": ROUTING_INPUTS, "outputs": {}, "stage_id": "executor"}, "outputs.handler"),
    ({"inputs": ROUTING_INPUTS, "outputs": {}, "stage_id": "router"}, "stage_id"),
])
def test_resolving_a_fill_names_what_is_missing(kwargs: dict[str, Any], field: str) -> None:
    stage_id = kwargs.pop("stage_id", "handler")
    with pytest.raises(InvalidArgument) as err:
        resolve_bindings(load_builtin("routing"), "routing/router", "get_weather", stage_id,
                         **kwargs)
    assert err.value.field == field


def test_candidate_outside_a_fixed_list_is_refused() -> None:
    template = parse_template({
        "id": "t", "version": 1, "model": "m",
        "stages": [{"id": "d", "kind": "llm", "prompt": "x", "sampling": {"max_tokens": 1}},
                   {"id": "h", "kind": "llm", "prompt": "{{c}}", "sampling": {"max_tokens": 1}}],
        "decisions": [{"stage": "d", "space": "bounded", "candidates": ["a"],
                       "semantics": "exclusive", "subgraph": [{"stage": "h",
                                                               "bind": {"c": "candidate"}}]}]})
    assert resolve_bindings(template, "t/d", "a", "h", inputs={}, outputs={}) == {"c": "a"}
    with pytest.raises(InvalidArgument, match="candidate"):
        resolve_bindings(template, "t/d", "z", "h", inputs={}, outputs={})


# --- properties ------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(values=st.dictionaries(st.sampled_from(["a", "b", "c"]), texts, min_size=3))
def test_rendering_is_deterministic(values: dict[str, str]) -> None:
    template = one_stage("A={{a}}; B={{b}}; C={{c}}; A again={{a}}")
    reparsed = parse_template(template.to_dict())
    assert render_stage(template, "s", values) == render_stage(reparsed, "s", values)


@settings(max_examples=80, deadline=None)
@given(x=texts, y=texts)
def test_one_placeholder_renders_different_values_differently(x: str, y: str) -> None:
    template = one_stage("Question: {{q}}\nAnswer:")
    def render(value: str) -> bytes:
        return render_stage(template, "s", {"q": value}).input
    assert (render(x) == render(y)) == (x == y)


@settings(max_examples=80, deadline=None)
@given(x=st.tuples(texts, texts), y=st.tuples(texts, texts))
def test_tool_arguments_render_injectively(x: tuple[str, str], y: tuple[str, str]) -> None:
    template = one_stage(args={"query": "{{a}}", "filter": "{{b}}"})
    def render(v: tuple[str, str]) -> bytes:
        return render_stage(template, "s", {"a": v[0], "b": v[1]}).input
    assert (render(x) == render(y)) == (x == y)
    assert json.loads(render(x)) == {"query": x[0], "filter": x[1]}


@settings(max_examples=80, deadline=None)
@given(x=st.tuples(texts, texts), y=st.tuples(texts, texts))
def test_separated_placeholders_render_injectively(x: tuple[str, str],
                                                   y: tuple[str, str]) -> None:
    x, y = tuple(v.replace("|", "") for v in x), tuple(v.replace("|", "") for v in y)
    template = one_stage("<{{a}}|{{b}}>")
    def render(v: tuple[str, ...]) -> str:
        return render_text(template.stages[0].prompt, {"a": v[0], "b": v[1]})
    assert (render(x) == render(y)) == (x == y)


# -- chat form ----------------------------------------------------------------------------------

def _chat_stage(**extra: Any) -> Template:
    stage = {"id": "s", "kind": "llm", "prompt": "Call {{function}} for: {{query}}",
             "chat": True, "sampling": {"max_tokens": 8}, **extra}
    return parse_template({"id": "t", "version": 1, "model": "m", "stages": [stage]})


def test_a_chat_form_stage_renders_as_the_chat_fronts_render_its_messages() -> None:
    """The fill of a stage in chat form names what a chat, Responses or Messages request with
    the same turns names: one ChatML rendering (``templates.chatml``) for both."""
    from services.gateway.http.chat import parse_chat

    template = _chat_stage(system="You write calls for {{query}}.")
    assert template.stage("s").inputs == ("query", "function")
    rendered = render_stage(template, "s", {"function": "f", "query": "q"})
    parsed = parse_chat({"messages": [{"role": "system", "content": "You write calls for q."},
                                      {"role": "user", "content": "Call f for: q"}]})
    assert rendered.text == parsed.prompt and parsed.spec is None
    plain = render_stage(one_stage("Call {{function}} for: {{query}}"), "s",
                         {"function": "f", "query": "q"})
    assert plain.text == "Call f for: q"  # without chat: the prompt as written


def test_a_system_turn_needs_the_chat_form() -> None:
    with pytest.raises(Exception, match="system"):
        parse_template({"id": "t", "version": 1, "model": "m", "stages": [
            {"id": "s", "kind": "llm", "prompt": "p", "system": "s",
             "sampling": {"max_tokens": 8}}]})
