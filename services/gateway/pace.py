"""The decode pace: how fast each model generates, learned from the generations the gateway runs.

The executor observes every finished generation into one ``DecodePace``; speculation reads it
(it projects a decision's remaining resolution window and what a candidate's fill would cost:
C3's estimates, dynbranch §3.4) and turns wall seconds into engine seconds in its reports. The
composition root hands the one instance to both. May import: ``services.common`` only.
"""

from __future__ import annotations

import math


class DecodePace:
    """Per model, how long a generation takes per output token (wall seconds, EWMA) and how
    many engine seconds one wall second is (1 on a real engine; 1 / time_scale on the sim):
    what projects a decision's remaining resolution window."""

    def __init__(self, alpha: float = 0.2) -> None:
        self.alpha = alpha
        self._per_token: dict[str, float] = {}
        self._engine_per_wall: dict[str, float] = {}
        self._tokens_per_byte: dict[str, float] = {}

    def observe(self, model: str, wall_s: float, engine_s: float, tokens: int) -> None:
        """Learn from one finished generation."""
        if tokens <= 0 or wall_s <= 0:
            return
        for table, value in ((self._per_token, wall_s / tokens),
                             (self._engine_per_wall, engine_s / wall_s if engine_s > 0 else 1.0)):
            old = table.get(model)
            table[model] = value if old is None else old + self.alpha * (value - old)

    def observe_prompt(self, model: str, prompt_bytes: int, prompt_tokens: int) -> None:
        """Learn how many tokens a prompt byte is on ``model``'s tokenizer."""
        if prompt_bytes > 0 and prompt_tokens > 0:
            value, old = prompt_tokens / prompt_bytes, self._tokens_per_byte.get(model)
            self._tokens_per_byte[model] = (value if old is None
                                            else old + self.alpha * (value - old))

    def prompt_tokens(self, model: str, text: str) -> int:
        """Projected prompt tokens of ``text`` on ``model`` (4 bytes a token until learned)."""
        return math.ceil(len(text.encode()) * self._tokens_per_byte.get(model, 0.25))

    def engine_per_wall(self, model: str) -> float:
        """Engine seconds per wall second on ``model`` (1 until learned; 1 / time_scale on a
        compressed sim)."""
        return self._engine_per_wall.get(model, 1.0)

    def engine_s_per_token(self, model: str) -> float | None:
        """Engine seconds one output token takes on ``model`` (None before any generation)."""
        per_token = self._per_token.get(model)
        if per_token is None:
            return None
        return per_token * self._engine_per_wall[model]  # both are learned together

    def window_s(self, model: str, max_tokens: int, elapsed_wall_s: float) -> float:
        """Remaining resolution window of a decision decoding up to ``max_tokens``, in engine
        seconds: 0 when nothing is known yet; negative once it has closed."""
        per_token = self._per_token.get(model)
        if per_token is None:
            return 0.0
        remaining_wall = max_tokens * per_token - elapsed_wall_s
        return remaining_wall * self._engine_per_wall[model] if remaining_wall > 0 else -1.0


__all__ = ["DecodePace"]
