"""How a stage result is stored in the library: enough to answer a later demand exactly."""

from __future__ import annotations

import json
from dataclasses import dataclass

from services.common.generation import FinishReason, Usage


@dataclass(frozen=True, slots=True)
class StoredResult:
    """The recorded answer of one stage execution."""

    text: str
    finish_reason: FinishReason
    usage: Usage

    def encode(self) -> bytes:
        """Compact JSON bytes."""
        u = self.usage
        return json.dumps([self.text, int(self.finish_reason), u.prompt_tokens,
                           u.cached_prompt_tokens, u.completion_tokens],
                          separators=(",", ":"), ensure_ascii=False).encode()

    @classmethod
    def decode(cls, data: bytes) -> StoredResult:
        """Inverse of :meth:`encode`; raises ValueError on foreign bytes."""
        try:
            text, reason, prompt, cached, completion = json.loads(data)
            return cls(text, FinishReason(reason), Usage(prompt, cached, completion))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"not a stored stage result: {exc}") from None


__all__ = ["StoredResult"]
