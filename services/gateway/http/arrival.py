"""One arrival representation for every HTTP protocol the front speaks, and the one way it
becomes a core ``Demand`` (the paper's §4: harnesses attach "into the same arrival
representation from their own wire protocols").

Each protocol module parses its own body into an :class:`Arrival`: OpenAI chat and completions
(``http.schema``), the OpenAI Responses API (``http.responses``) and Anthropic's Messages API
(``http.messages``). A chat-shaped protocol turns its conversation into OpenAI chat messages and
function tools and hands them to ``http.chat.conversation``, the single place that validates,
renders and specs a conversation, so the same conversation arriving on any protocol renders the
same prompt, carries the same chat spec and has the same reuse name. :func:`demand_of` then
builds the core demand (tenant from the key, workflow tags from the ``x-dynbranch-*`` headers,
template stage, sampling checked against the model) and :func:`settle_from_history` settles a
tagged workflow's open branches from the tool results that end its conversation; both are the
same for every protocol. Only rendering answers back is per protocol.

Field helpers here parse the way OpenAI and Anthropic parse: ``null`` means "not given", and a
known field of the wrong type is refused naming the field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from services.common.values.chat import ChatSpec
from services.common.values.errors import InvalidArgument, NotFound, quoted
from services.common.values.generation import Sampling
from services.gateway.templates import Stage, StageKind
from services.gateway.values import Demand, new_request_id

if TYPE_CHECKING:
    from services.gateway.core import GatewayCore
    from services.gateway.http.chat import ParsedChat

#: ``max_tokens`` when a chat-shaped request sets none (clamped to the model's limit).
CHAT_DEFAULT_MAX_TOKENS = 256
MAX_SEED = (1 << 64) - 1
#: The largest ``top_k`` (the engines' int32 field); any value above the vocabulary is "off".
MAX_TOP_K = (1 << 31) - 1
HEADER_STAGE = "x-dynbranch-stage"
#: Workflow-tag headers and the ``Demand`` fields they fill.
TAG_HEADERS = {"x-dynbranch-workflow-type": "workflow_type",
               "x-dynbranch-workflow-id": "workflow_id", "x-dynbranch-agent-id": "agent_id"}
MAX_TAG_CHARS = 256


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One generation endpoint, declared by its wire module (``schema``: OpenAI chat and
    completions; ``responses``; ``messages``) and listed once in ``wires.WIRES``, from which the
    front's routes and the metrics' protocol labels are derived."""

    #: The ``object`` of its answers (``chat.completion``, ``text_completion``, ...).
    value: str
    #: The route it is served on (``POST``).
    path: str
    #: The API it belongs to: the ``protocol`` label of the front's metrics.
    protocol: str
    #: Prefix of response ids (``chatcmpl-``, ``cmpl-``, ``resp_``, ``msg_``).
    id_prefix: str
    #: The request field a demand's prompt comes from (named in errors).
    prompt_field: str
    #: An OpenAI chat completion (chat-shaped answer bodies, ``max_completion_tokens``).
    chat: bool = False
    #: The caller's key may come in ``x-api-key`` when no ``Authorization`` is sent (what
    #: Anthropic's clients send).
    api_key_header: bool = False


class ModelNotFound(NotFound):
    """The request names a model no engine serves (HTTP 404 ``model_not_found``)."""


@dataclass(frozen=True, slots=True)
class WorkflowContext:
    """Template context of a tagged request (the ``dynbranch`` body extension)."""

    inputs: tuple[tuple[str, str], ...] = ()
    outputs: tuple[tuple[str, str], ...] = ()
    offered: tuple[str, ...] = ()
    observation: str = ""


@dataclass(frozen=True, slots=True)
class Arrival:
    """One parsed generation request, whatever protocol it came in on, before the gateway's
    limits are applied."""

    endpoint: Endpoint
    model: str
    prompt: str
    stream: bool
    include_usage: bool
    max_tokens: int | None
    temperature: float
    top_p: float
    top_k: int
    seed: int | None
    stop: tuple[str, ...]
    ignore_eos: bool
    #: The field ``max_tokens`` came from (``max_completion_tokens``, ``max_output_tokens``...).
    max_tokens_field: str = "max_tokens"
    #: ``max_tokens`` when the request sets none (clamped to the model's limit).
    default_max_tokens: int = CHAT_DEFAULT_MAX_TOKENS
    #: Template context from the ``dynbranch`` body extension (``extra_body`` in the SDKs).
    context: WorkflowContext = WorkflowContext()
    #: Choices asked for (``n``; chat and completions only).
    n: int = 1
    #: The parsed conversation (chat-shaped protocols): prompt, spec, last tool result and
    #: last called functions.
    conversation: ParsedChat | None = None
    #: Request fields a protocol echoes in its answer (Responses: tools, metadata, ...).
    echo: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def chat(self) -> bool:
        """Whether this is an OpenAI chat completion request."""
        return self.endpoint.chat

    @property
    def chat_spec(self) -> ChatSpec | None:
        """Tool calling or JSON output (None for plain text or completions)."""
        return self.conversation.spec if self.conversation is not None else None

    def sampling(self, max_tokens_limit: int) -> Sampling:
        """Sampling parameters, ``max_tokens`` checked against the model's limit."""
        max_tokens = self.max_tokens
        if max_tokens is None:
            max_tokens = min(self.default_max_tokens, max_tokens_limit)
        elif max_tokens < 1:
            raise InvalidArgument(self.max_tokens_field, f"must be >= 1, got {max_tokens}")
        elif max_tokens > max_tokens_limit:
            raise InvalidArgument(self.max_tokens_field,
                                  f"must be <= {max_tokens_limit}, got {max_tokens}")
        return Sampling(max_tokens=max_tokens, temperature=self.temperature, top_p=self.top_p,
                        top_k=self.top_k, seed=self.seed, stop=self.stop,
                        ignore_eos=self.ignore_eos)


# -- field helpers ----------------------------------------------------------------------------

KINDS: dict[str, Callable[[Any], bool]] = {
    "a string": lambda v: isinstance(v, str),
    "an integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "a number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "a boolean": lambda v: isinstance(v, bool),
    "an object": lambda v: isinstance(v, dict),
    "an array": lambda v: isinstance(v, list),
}


def json_type(value: Any) -> str:
    """The JSON name of ``value``'s type."""
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
             dict: "object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def field_of(body: Mapping[str, Any], name: str, kind: str, default: Any = None,
             where: str = "") -> Any:
    """``body[name]`` checked against ``kind`` (one of ``KINDS``); null or absent → default.
    ``where`` prefixes the name in errors (a nested object's path)."""
    value = body.get(name)
    if value is None:
        return default
    if not KINDS[kind](value):
        raise InvalidArgument(f"{where}{name}", f"must be {kind}, got {json_type(value)}")
    return value


def required_string(block: Mapping[str, Any], name: str, where: str,
                    empty: bool = False) -> str:
    """``block[name]``, which must be a string (a non-empty one unless ``empty``); ``where``
    is the block's path in errors."""
    value = block.get(name)
    if not isinstance(value, str) or not (value or empty):
        raise InvalidArgument(f"{where}.{name}", "required (a string)" if empty
                              else "required (a non-empty string)")
    return value


def ranged(body: Mapping[str, Any], name: str, default: float, low: float, high: float,
           low_open: bool = False) -> float:
    """A number in ``[low, high]`` (``(low, high]`` when ``low_open``)."""
    number = field_of(body, name, "a number", default)
    try:
        value = float(number)
    except OverflowError:  # an integer past a double's range, e.g. 10**400
        raise InvalidArgument(name, f"must be in [{low:g}, {high:g}]") from None
    if not (low < value if low_open else low <= value) or not value <= high:
        bracket = "(" if low_open else "["
        raise InvalidArgument(name, f"must be in {bracket}{low:g}, {high:g}], got {value:g}")
    return value


def seed_of(body: Mapping[str, Any]) -> int | None:
    """``seed`` in ``[0, 2^64)``, or None."""
    value: int | None = field_of(body, "seed", "an integer")
    if value is not None and not 0 <= value <= MAX_SEED:
        raise InvalidArgument("seed", f"must be in [0, 2^64), got {quoted(value)}")
    return value


def top_k_of(body: Mapping[str, Any]) -> int:
    """``top_k`` (vLLM's extension, Anthropic's field) in ``[-1, 2^31)``; 0 and -1 mean
    "off"."""
    value: int = field_of(body, "top_k", "an integer", 0)
    if not -1 <= value <= MAX_TOP_K:
        raise InvalidArgument("top_k", f"must be in [-1, {MAX_TOP_K}], got {quoted(value)}")
    return max(value, 0)


def stops_of(name: str, value: Any, most: int, most_chars: int) -> tuple[str, ...]:
    """Stop sequences: a string or an array of at most ``most`` non-empty strings."""
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise InvalidArgument(name, "must be a string or an array of strings")
    if len(stops) > most or any(not s or len(s) > most_chars for s in stops):
        raise InvalidArgument(name, f"at most {most} non-empty strings of at most "
                                    f"{most_chars} characters")
    return tuple(stops)


def refuse(body: Mapping[str, Any], unsupported: Mapping[str, Callable[[Any], bool]],
           where: str = "") -> None:
    """Refuse, by name, the first field whose value this gateway cannot honour."""
    for name, cannot in unsupported.items():
        if cannot(body.get(name)):
            raise InvalidArgument(f"{where}{name}", "is not supported by this gateway")


def _strings(where: str, value: Any, mapping: bool) -> Any:
    if mapping:
        if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            raise InvalidArgument(where, "must be an object of strings")
        return tuple(sorted(value.items()))
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise InvalidArgument(where, "must be a list of non-empty strings")
    return tuple(value)


def parse_context(body: Mapping[str, Any]) -> WorkflowContext:
    """The ``dynbranch`` extension object: template inputs, upstream outputs, offered
    candidates and the latest observation (what the gRPC ``StageDemand`` carries)."""
    ext = field_of(body, "dynbranch", "an object", {})
    unknown = sorted(set(ext) - {"inputs", "outputs", "offered", "observation"})
    if unknown:
        raise InvalidArgument(f"dynbranch.{unknown[0]}", "unknown field")
    return WorkflowContext(
        inputs=_strings("dynbranch.inputs", ext.get("inputs", {}), True),
        outputs=_strings("dynbranch.outputs", ext.get("outputs", {}), True),
        offered=_strings("dynbranch.offered", ext.get("offered", []), False),
        observation=field_of(ext, "observation", "a string", ""))


# -- the demand -------------------------------------------------------------------------------


def demand_of(core: GatewayCore, tenant: str, req: Arrival, headers: Mapping[str, str]
              ) -> Demand:
    """The core demand of one arrival; a tool stage takes no model or sampling."""
    tags = {name: tag(headers, header) for header, name in TAG_HEADERS.items()}
    template_id, stage_id, stage = _stage(core, tag(headers, HEADER_STAGE))
    is_tool = stage is not None and stage.kind is StageKind.TOOL
    if not is_tool:
        check_model(core, req.model)
    sampling = None if is_tool else req.sampling(core.max_tokens_limit(req.model))
    if template_id and not tags["workflow_type"]:
        tags["workflow_type"] = template_id
    ctx, chat = req.context, req.conversation
    if req.n > 1 and stage is not None:
        raise InvalidArgument("n", f"must be 1 on a tagged stage ({HEADER_STAGE}), got {req.n}")
    # A tool-calling decision offers its tools; a tool result is the latest observation.
    spec = req.chat_spec
    offered = ctx.offered or (spec.tool_names() if spec else ())
    observation = ctx.observation or (chat.last_tool_result if chat else "")
    return Demand(tenant=tenant, request_id=new_request_id(), model=req.model,
                  prompt=req.prompt, sampling=sampling, template_id=template_id,
                  stage_id=stage_id, stage_version=stage.version if stage else 0,
                  inputs=ctx.inputs, outputs=ctx.outputs, offered=offered,
                  observation=observation, chat=spec, stage=stage, **tags)


def settle_from_history(core: GatewayCore, demand: Demand, req: Arrival) -> None:
    """A tagged request whose conversation ends in the results of one function's calls says
    which tool the last decision chose: settle the workflow's open branches at its template's
    offered decision points with that function, as ``Settle`` does."""
    called = set(req.conversation.last_called) if req.conversation else set()
    if len(called) != 1 or not demand.tagged or not demand.workflow_id:
        return
    selected = called.pop()
    for point in core.decisions(demand.template_id):
        if point.offered:
            core.settle(demand.tenant, demand.workflow_id, point.coordinate, selected)


def tag(headers: Mapping[str, str], name: str) -> str:
    """A workflow-tag header's value (at most ``MAX_TAG_CHARS``)."""
    value = headers.get(name, "").strip()
    if len(value) > MAX_TAG_CHARS:
        raise InvalidArgument(name, f"at most {MAX_TAG_CHARS} characters")
    return value


def _stage(core: GatewayCore, value: str) -> tuple[str, str, Stage | None]:
    """``template/stage`` → its ids and registered stage; NotFound names what is missing."""
    if not value:
        return "", "", None
    template_id, _, stage_id = value.partition("/")
    if not template_id or not stage_id:
        raise InvalidArgument(HEADER_STAGE, f"expected 'template_id/stage_id', got {quoted(value)}")
    return template_id, stage_id, core.stage(template_id, stage_id)


def check_model(core: GatewayCore, model: str) -> None:
    """Refuse a missing or unserved model (404 ``model_not_found``)."""
    if not model:
        raise InvalidArgument("model", "required")
    served = core.models()
    if model not in served:
        known = ", ".join(sorted(served)) or "none"
        raise ModelNotFound(f"The model {quoted(model)} does not exist (served: {known})")


__all__ = ["CHAT_DEFAULT_MAX_TOKENS", "HEADER_STAGE", "MAX_SEED", "MAX_TOP_K", "TAG_HEADERS",
           "Arrival", "Endpoint", "ModelNotFound", "WorkflowContext", "check_model", "demand_of",
           "field_of", "json_type", "parse_context", "ranged", "refuse", "seed_of",
           "settle_from_history", "stops_of", "tag", "top_k_of"]
