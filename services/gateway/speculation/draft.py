"""A drafted predictor: a small model decodes candidate names from the decision context
(dynbranch §3.3, §5.3 "drafter", Figure 11b), so that candidate generation has a real cost for
the generation gate (Action 0) to price.

The draft runs on an engine agent serving ``model`` (a small model: the sim's
``qwen3-0.6b-h200`` preset, or the tiny model on vLLM), with fill priority and greedy decoding,
time-boxed by ``deadline_s``: at the deadline it yields nothing. The branch manager measures the
whole generation step and reports it as the branch's setup time, so the time is charged whether
or not the draft helped. The decoded text is read one line at a time; a line names a candidate
when it equals one of the bounded space's candidates (case-insensitively), or, for an open space,
when ``resolve`` maps it to names (for ReAct, the corpus-title index). Nothing else is
proposed: on the sim, whose text is pseudo-text, a draft therefore mostly costs without
proposing, which is what a predictor that does not pay off looks like to Action 0.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable

from services.common.values.candidates import RankedCandidate
from services.common.values.errors import DynbranchError
from services.common.values.generation import GenerationRequest, Priority, Sampling
from services.gateway.ports import EnginePort
from services.gateway.speculation.predictors import PredictionContext, ranked

log = logging.getLogger(__name__)

#: Longest context passed to the draft (characters of the observation kept, from the end).
MAX_CONTEXT_CHARS = 4000


class DraftPredictor:
    """Ranks candidates by what a draft model names first; ``arank`` is the (async) entry."""

    def __init__(self, engines: EnginePort, model: str, *, max_tokens: int = 24,
                 deadline_s: float = 1.0, limit: int = 3,
                 resolve: Callable[[str], list[str]] | None = None) -> None:
        if max_tokens < 1 or deadline_s <= 0:
            raise ValueError("max_tokens must be >= 1 and deadline_s > 0")
        self.engines, self.model = engines, model
        self.max_tokens, self.deadline_s, self.limit = max_tokens, deadline_s, limit
        self.resolve = resolve
        self._seq = itertools.count()
        self.drafts = self.timeouts = self.failures = 0

    def rank(self, coordinate: str, context: PredictionContext) -> list[RankedCandidate]:
        """A draft needs an engine call: use ``arank``."""
        raise TypeError("DraftPredictor decodes on an engine: call arank()")

    def prompt(self, coordinate: str, context: PredictionContext) -> str:
        """The draft's input: the decision, what was observed, and the options if bounded."""
        options = "\n".join(f"- {c}" for c in context.candidates)
        observed = context.observation[-MAX_CONTEXT_CHARS:]
        return (f"Decision point: {coordinate}\nContext:\n{observed}\n"
                + (f"Options:\n{options}\n" if options else "")
                + "Name the most likely next choice first, one name per line:\n")

    async def arank(self, coordinate: str, context: PredictionContext) -> list[RankedCandidate]:
        """Draft, parse, rank; [] at the deadline or on an engine failure (logged)."""
        request = GenerationRequest(f"draft-{next(self._seq)}", self.model,
                                    self.prompt(coordinate, context),
                                    Sampling(max_tokens=self.max_tokens), Priority.FILL)
        self.drafts += 1
        try:
            ex = await asyncio.wait_for(self.engines.generate(request, self.deadline_s),
                                        self.deadline_s)
        except TimeoutError:
            self.timeouts += 1
            return []
        except DynbranchError as exc:
            self.failures += 1
            log.warning("draft on %s failed: %s", self.model, exc)
            return []
        return self.parse(ex.text, context)

    def parse(self, text: str, context: PredictionContext) -> list[RankedCandidate]:
        """Candidates named by the draft's lines, in order, without repeats or exclusions."""
        bounded = {c.casefold(): c for c in context.candidates}
        excluded = set(context.exclude)
        names: list[str] = []
        for line in text.splitlines():
            line = line.strip().lstrip("-*0123456789.) ").strip()
            if not line:
                continue
            if bounded:
                found = [bounded[line.casefold()]] if line.casefold() in bounded else []
            else:
                found = self.resolve(line) if self.resolve is not None else []
            names += [n for n in found if n not in excluded and n not in names]
        names = names[: self.limit]
        return ranked((n, 1.0 / (i + 1)) for i, n in enumerate(names))


__all__ = ["DraftPredictor"]
