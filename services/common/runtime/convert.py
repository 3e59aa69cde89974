"""Edge conversions between protos and the plain values core modules use (STYLE.md §2)."""

from __future__ import annotations

import json
from collections.abc import Iterable

from services.common.pb import common_pb2
from services.common.values.chat import ChatSpec, ToolCall, ToolChoice, schema_problem
from services.common.values.errors import InvalidArgument, quoted
from services.common.values.generation import Priority, Sampling, Timings, Usage

#: Upper bound on stop strings per request, and on each one's length.
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 256


def sampling_from_proto(msg: common_pb2.SamplingParams, field: str, max_tokens_limit: int
                        ) -> Sampling:
    """Validate and convert sampling parameters; errors name ``field.<name>``."""
    if msg.max_tokens < 1:
        raise InvalidArgument(f"{field}.max_tokens", f"must be >= 1, got {msg.max_tokens}")
    if msg.max_tokens > max_tokens_limit:
        raise InvalidArgument(f"{field}.max_tokens",
                              f"must be <= {max_tokens_limit}, got {msg.max_tokens}")
    if not msg.temperature >= 0.0 or msg.temperature > 100.0:
        raise InvalidArgument(f"{field}.temperature", f"must be in [0, 100], got {msg.temperature}")
    if not 0.0 <= msg.top_p <= 1.0:
        raise InvalidArgument(f"{field}.top_p", f"must be in [0, 1], got {msg.top_p}")
    if msg.top_k < 0:
        raise InvalidArgument(f"{field}.top_k", f"must be >= 0, got {msg.top_k}")
    if len(msg.stop) > MAX_STOP_STRINGS or any(len(s) > MAX_STOP_CHARS or not s for s in msg.stop):
        raise InvalidArgument(f"{field}.stop", f"at most {MAX_STOP_STRINGS} non-empty strings "
                              f"of at most {MAX_STOP_CHARS} characters")
    return Sampling(max_tokens=msg.max_tokens, temperature=msg.temperature,
                    top_p=msg.top_p or 1.0, top_k=msg.top_k,
                    seed=msg.seed if msg.HasField("seed") else None,
                    stop=tuple(msg.stop), ignore_eos=msg.ignore_eos)


def sampling_to_proto(s: Sampling) -> common_pb2.SamplingParams:
    """The proto form of sampling parameters."""
    msg = common_pb2.SamplingParams()
    sampling_into(msg, s)
    return msg


def sampling_into(msg: common_pb2.SamplingParams, s: Sampling) -> None:
    """Fill ``msg``, an empty message (e.g. a new request's own sampling field), in place
    with ``s``."""
    msg.max_tokens, msg.temperature, msg.top_p, msg.top_k = (s.max_tokens, s.temperature,
                                                             s.top_p, s.top_k)
    msg.ignore_eos = s.ignore_eos
    if s.stop:
        msg.stop.extend(s.stop)
    if s.seed is not None:
        msg.seed = s.seed


def chat_to_proto(spec: ChatSpec) -> common_pb2.ChatSpec:
    """The proto form of a chat spec."""
    return common_pb2.ChatSpec(
        messages_json=spec.messages_json, tools_json=spec.tools_json,
        tool_choice=str(spec.tool_choice), tool_name=spec.tool_name,
        parallel_tool_calls=spec.parallel_tool_calls,
        response_format_json=spec.response_format_json)


def chat_from_proto(msg: common_pb2.ChatSpec, field: str) -> ChatSpec:
    """Validate and convert a chat spec; errors name ``field.<name>``."""
    try:
        choice = ToolChoice(msg.tool_choice or "auto")
    except ValueError:
        raise InvalidArgument(f"{field}.tool_choice",
                              f"unknown choice {quoted(msg.tool_choice)}") from None
    for name in ("messages_json", "tools_json", "response_format_json"):
        text = getattr(msg, name)
        try:
            value = json.loads(text) if text else []
        except ValueError:
            raise InvalidArgument(f"{field}.{name}", "not valid JSON") from None
        if not isinstance(value, list if name != "response_format_json" else dict | list):
            raise InvalidArgument(f"{field}.{name}", "wrong JSON type")
    if not msg.messages_json:
        raise InvalidArgument(f"{field}.messages_json", "required")
    if (choice is ToolChoice.FUNCTION) != bool(msg.tool_name):
        raise InvalidArgument(f"{field}.tool_name", "set exactly when tool_choice is 'function'")
    spec = ChatSpec(messages_json=msg.messages_json, tools_json=msg.tools_json,
                    tool_choice=choice, tool_name=msg.tool_name,
                    parallel_tool_calls=msg.parallel_tool_calls,
                    response_format_json=msg.response_format_json)
    for i, tool in enumerate(spec.tools()):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise InvalidArgument(f"{field}.tools_json", f"tools[{i}] is not a function tool "
                                                         f"({{'type': 'function', 'function': "
                                                         f"{{'name': ...}}}})")
    fmt = spec.response_format()
    if fmt is not None and not (isinstance(fmt, dict) and isinstance(fmt.get("type"), str)):
        raise InvalidArgument(f"{field}.response_format_json", "must be an object with a type")
    if fmt is not None and fmt["type"] == "json_schema" and not isinstance(
            fmt.get("json_schema"), dict):
        raise InvalidArgument(f"{field}.response_format_json", "json_schema must be an object")
    for where, schema in spec.schemas():
        problem = schema_problem(schema)
        if problem is not None:
            name = "tools_json" if where.startswith("tools") else "response_format_json"
            raise InvalidArgument(f"{field}.{name}", f"{where} {problem}")
    return spec


def tool_calls_to_proto(calls: tuple[ToolCall, ...]) -> list[common_pb2.ToolCall]:
    """The proto form of tool calls."""
    return [common_pb2.ToolCall(id=c.id, name=c.name, arguments=c.arguments) for c in calls]


def tool_calls_from_proto(msgs: Iterable[common_pb2.ToolCall]) -> tuple[ToolCall, ...]:
    """Tool calls from their repeated proto field."""
    return tuple(ToolCall(m.id, m.name, m.arguments) for m in msgs)


def priority_from_proto(value: int) -> Priority:
    """UNSPECIFIED is canonical; unknown values are refused."""
    if value in (common_pb2.PRIORITY_CLASS_UNSPECIFIED, common_pb2.PRIORITY_CLASS_CANONICAL):
        return Priority.CANONICAL
    if value == common_pb2.PRIORITY_CLASS_FILL:
        return Priority.FILL
    raise InvalidArgument("priority", f"unknown priority class {value}")


def usage_to_proto(u: Usage) -> common_pb2.Usage:
    """The proto form of usage."""
    msg = common_pb2.Usage()
    usage_into(msg, u)
    return msg


def usage_into(msg: common_pb2.Usage, u: Usage) -> None:
    """Fill ``msg`` (e.g. a response's own usage field) in place with ``u``."""
    msg.prompt_tokens, msg.cached_prompt_tokens = u.prompt_tokens, u.cached_prompt_tokens
    msg.completion_tokens = u.completion_tokens


def timings_to_proto(t: Timings) -> common_pb2.Timings:
    """The proto form of timings."""
    msg = common_pb2.Timings()
    timings_into(msg, t)
    return msg


def timings_into(msg: common_pb2.Timings, t: Timings) -> None:
    """Fill ``msg`` (e.g. a response's own timings field) in place with ``t``."""
    msg.queue_s, msg.prefill_s, msg.decode_s, msg.total_s = (t.queue_s, t.prefill_s,
                                                             t.decode_s, t.total_s)


def require(value: str, field: str, max_len: int | None = None) -> str:
    """A required string field, optionally bounded in length."""
    if not value:
        raise InvalidArgument(field, "required")
    if max_len is not None and len(value) > max_len:
        raise InvalidArgument(field, f"at most {max_len} characters, got {len(value)}")
    return value


__all__ = ["chat_from_proto", "chat_to_proto", "priority_from_proto", "require",
           "sampling_from_proto", "sampling_into", "sampling_to_proto", "timings_into",
           "timings_to_proto", "tool_calls_from_proto", "tool_calls_to_proto", "usage_into",
           "usage_to_proto"]
