"""Value equivalence on a real engine, honestly (DESIGN.md §5.1).

Promotion returns exactly what canonical execution would *if execution is deterministic*. Greedy
decoding on vLLM's CPU kernels is not batch-invariant: a request decoded beside others can take
a different token where its top two logits nearly tie, so a fill decoded beside canonical work
can legitimately differ from the floor decoded alone. Where vLLM has batch-invariant kernels (an
NVIDIA GPU of compute capability >= 8.0) the backend and the ``gpu`` overlay turn them on and
equivalence stays exact. Elsewhere every divergence of an arm from the floor is classified:

- ``floor_unstable``: the floor itself, rerun under another batch composition (its workflows
  concurrent instead of one at a time), differs on that workflow: the engine, not speculation,
  is what varies;
- ``near_tie``: at the first token where the texts part, the floor's top-1 and top-2 logits
  differ by less than ``EPSILON`` (measured along the floor's own text by ``LogitProbe``: the
  model in float32 through ``transformers``);
- ``divergent``: anything else (a different path, a failure, a split at a clear choice), which
  fails the check.

Only the first differing call of a workflow is classified: later calls render its text, so they
differ as a consequence. ``EPSILON`` is 0.05 logits: on the tiny random-weight model the median
top-1/top-2 gap along a greedy decode is 0.27 and the 10th percentile 0.15 (measured), while
bfloat16 against float32 moves a gap by about 0.01, so a near tie is rare and a split at a clear
choice is caught.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from loadgen.arms.equivalence import compare_outputs
from loadgen.arms.recording import CallRecord
from loadgen.workloads.base import WorkflowResult

#: Largest top-1/top-2 logit gap at which a split counts as a near tie.
EPSILON = 0.05
KINDS = ("floor_unstable", "near_tie", "divergent")


@dataclass(frozen=True, slots=True)
class Divergence:
    """One workflow whose arm outputs differ from the floor's, and why that is allowed or not."""

    workflow_id: str
    kind: str
    #: The first differing call (index, stage), the character where the texts part, the gap.
    call: int = -1
    stage: str = ""
    at_char: int = -1
    gap: float | None = None
    detail: str = ""

    @property
    def allowed(self) -> bool:
        """Whether the divergence is the engine's, not speculation's."""
        return self.kind != "divergent"


def first_difference(a: str, b: str) -> int:
    """The index of the first character where ``a`` and ``b`` differ (the shorter length when
    one is a prefix of the other)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


#: ``gap(prompt, floor_text, at_char)``: the floor's top-1/top-2 logit gap at the token of its
#: text that holds character ``at_char``.
GapFn = Callable[[str, str, int], float]


def classify(arm: Iterable[WorkflowResult], floor: Sequence[WorkflowResult],
             rerun: Sequence[WorkflowResult], prompts: dict[str, Sequence[CallRecord]],
             gap: GapFn, epsilon: float = EPSILON) -> list[Divergence]:
    """Every workflow of ``arm`` that differs from ``floor``, classified (module docstring);
    ``rerun`` is the floor under another batch composition, ``prompts`` the floor's call
    records (with their rendered prompts) by workflow id."""
    unstable = {m.workflow_id for m in compare_outputs(rerun, floor)}
    base = {r.workflow_id: r for r in floor}
    out = []
    for m in compare_outputs(arm, floor):
        if m.reason != "text":
            out.append(Divergence(m.workflow_id, "divergent", detail=f"{m.reason}: {m.detail}"))
            continue
        mine = next(r for r in arm if r.workflow_id == m.workflow_id)
        theirs = base[m.workflow_id]
        i, (a, b) = next((i, (x, y)) for i, (x, y) in enumerate(
            zip(mine.stages, theirs.stages, strict=True)) if x.text != y.text)
        at = first_difference(a.text, b.text)
        if m.workflow_id in unstable:
            out.append(Divergence(m.workflow_id, "floor_unstable", i, b.stage, at,
                                  detail="the floor's rerun differs too"))
            continue
        g = gap(prompts[m.workflow_id][i].prompt, b.text, at)
        out.append(Divergence(m.workflow_id, "near_tie" if g < epsilon else "divergent", i,
                              b.stage, at, round(g, 4)))
    return out


class LogitProbe:
    """The model's top-1/top-2 logit gaps along a text (float32, ``transformers``): the prompt
    tokenized as the engine tokenizes a text prompt, the text after it tokenized on its own."""

    def __init__(self, model_path: str) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self._torch = torch
        self.tokenizer: Any = AutoTokenizer.from_pretrained(model_path)
        self.model: Any = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=torch.float32).eval()

    def gaps(self, prompt: str, text: str) -> list[tuple[int, float]]:
        """(end character in ``text``, gap) for every token of ``text``: the gap is between the
        top two logits the model gave at that token's position."""
        prompt_ids = self.tokenizer(prompt).input_ids
        text_ids = self.tokenizer(text, add_special_tokens=False).input_ids
        ids = self._torch.tensor([prompt_ids + text_ids])
        with self._torch.no_grad():
            logits = self.model(ids).logits[0]
        out, end = [], 0
        for k, _ in enumerate(text_ids):
            end = len(self.tokenizer.decode(text_ids[:k + 1]))
            top = self._torch.topk(logits[len(prompt_ids) + k - 1], 2).values
            out.append((end, float(top[0] - top[1])))
        return out

    def gap(self, prompt: str, text: str, at_char: int) -> float:
        """The gap at the token of ``text`` that holds character ``at_char`` (the last token's
        when ``at_char`` is past the end: the texts part where one stops)."""
        found = self.gaps(prompt, text)
        if not found:
            return float("inf")
        return next((g for end, g in found if end > at_char), found[-1][1])


def summary(found: Sequence[Divergence]) -> dict[str, Any]:
    """Counts per kind and the divergences themselves, for a report."""
    return {"counts": {k: sum(d.kind == k for d in found) for k in KINDS},
            "allowed": all(d.allowed for d in found), "epsilon": EPSILON,
            "divergences": [{"workflow_id": d.workflow_id, "kind": d.kind, "call": d.call,
                             "stage": d.stage, "at_char": d.at_char, "gap": d.gap,
                             "detail": d.detail} for d in found]}


__all__ = ["EPSILON", "KINDS", "Divergence", "LogitProbe", "classify", "first_difference",
           "summary"]
