"""The one ChatML rendering of a conversation (Qwen3's, hermes-style tools): what a chat request
becomes on every front (``http.chat``), and what a template stage in chat form renders to
(``render``), so that a chat, Responses or Messages request carrying the stage's messages names
the same stage as its fill. Messages arrive normalized (role, text content, tool calls and ids);
the fronts validate them first."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
TOOLS_POSTAMBLE = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def render(messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] = ()) -> str:
    """The prompt of normalized ``messages``: ChatML turns, then an open assistant turn."""
    turns = []
    if tools:
        system = messages[0]["content"] + "\n\n" if messages[0]["role"] == "system" else ""
        # Sorted keys: the engine's template renders the canonical tools of the chat spec.
        lines = "".join("\n" + json.dumps(t, ensure_ascii=False, sort_keys=True) for t in tools)
        turns.append(f"<|im_start|>system\n{system}{TOOLS_PREAMBLE}{lines}{TOOLS_POSTAMBLE}"
                     "<|im_end|>\n")
        if messages[0]["role"] == "system":
            messages = messages[1:]
    for i, m in enumerate(messages):
        turns.append(_turn(m, messages[i - 1] if i else None,
                           messages[i + 1] if i + 1 < len(messages) else None))
    return "".join(turns) + "<|im_start|>assistant\n"


def _turn(m: dict[str, Any], before: dict[str, Any] | None,
          after: dict[str, Any] | None) -> str:
    if m["role"] == "tool":  # consecutive tool results share one user turn, as in Qwen3
        head = "" if before and before["role"] == "tool" else "<|im_start|>user"
        tail = "" if after and after["role"] == "tool" else "<|im_end|>\n"
        return f"{head}\n<tool_response>\n{m['content']}\n</tool_response>{tail}"
    text = m["content"]
    for call in m.get("tool_calls", ()):
        fn = call["function"]
        text += (("\n" if text else "") + '<tool_call>\n{"name": ' + json.dumps(fn["name"])
                 + ', "arguments": ' + fn["arguments"] + "}\n</tool_call>")
    return f"<|im_start|>{m['role']}\n{text}<|im_end|>\n"


__all__ = ["TOOLS_POSTAMBLE", "TOOLS_PREAMBLE", "render"]
