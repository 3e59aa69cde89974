"""Candidate predictors behind the candidate interface (dynbranch §3.1, §3.3, §2.1).

A predictor maps a branch coordinate and what is known before the branch resolves to a ranked
candidate list. The probabilities are normalized scores, not calibrated estimates: admission
takes them as the prior of selection rates it learns online per rank (§3.3), and reads equal
probabilities as a tie, candidates the predictor cannot tell apart, whose order says nothing
(``admission.core.tied_ranks``). A predictor whose order within equal scores is a ranking of its
own says so in its scores (``ranked_in_order``: ``ObservationEntities``;
``titles.CorpusTitles``).

- ``TemplateEnumeration``: a bounded space, in template (or offered) order.
- ``FrequencyPrior``: per-coordinate selection counts learned online, Laplace-smoothed; ties keep
  template order. With no enumerable space it ranks the coordinate's past selections.
- ``ObservationEntities``: an open space (ReAct): entities named in the previous observation,
  ranked by how often they are mentioned, then by recency.
- ``OfferedOptions``: HCI: exactly the options the harness offered, ranked by the prior.
- ``CompositePredictor``: a weighted merge with a top-K cut; forwards ``observe``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from services.common.values.candidates import RankedCandidate
from services.common.values.errors import InvalidArgument
from services.gateway.templates import CandidateSpace, DecisionPoint


@dataclass(frozen=True, slots=True)
class PredictionContext:
    """What a predictor may use: the enumerable space, the last observation, what to skip."""

    #: The bounded space: the template's list or the options the harness offered ("" if open).
    candidates: tuple[str, ...] = ()
    #: The previous observation, e.g. the last hop's retrieval result (ReAct).
    observation: str = ""
    #: Candidates not to propose, e.g. entities this workflow already searched.
    exclude: tuple[str, ...] = ()


@runtime_checkable
class Predictor(Protocol):
    """Ranks the candidates of a branch coordinate."""

    def rank(self, coordinate: str, context: PredictionContext) -> list[RankedCandidate]:
        """Candidates, best first."""
        ...


def context_for(point: DecisionPoint, *, offered: Sequence[str] = (), observation: str = "",
                exclude: Sequence[str] = ()) -> PredictionContext:
    """The prediction context of a decision point, given what the harness passed."""
    if point.offered:
        if not offered or not all(isinstance(o, str) and o for o in offered):
            raise InvalidArgument("offered", f"{point.coordinate} needs the offered options "
                                             "as non-empty strings")
        space = tuple(dict.fromkeys(offered))
    else:
        space = point.candidates if point.space is CandidateSpace.BOUNDED else ()
    return PredictionContext(space, observation, tuple(exclude))


def ranked(scores: Iterable[tuple[str, float]]) -> list[RankedCandidate]:
    """Rank ``(candidate, score)`` pairs in the given order, normalizing scores to sum 1."""
    pairs = list(scores)
    total = sum(s for _, s in pairs)
    return [RankedCandidate(c, i, s / total if total > 0 else 1.0 / len(pairs))
            for i, (c, s) in enumerate(pairs)]


def ranked_in_order(scores: Iterable[tuple[str, float]], step: float) -> list[RankedCandidate]:
    """``ranked``, for a predictor whose order within equal scores is a ranking of its own:
    each place scores ``step`` below its score, so no two share a probability and admission
    does not take them for a tie (``admission.core.tied_ranks``)."""
    return ranked((c, s - step * i) for i, (c, s) in enumerate(scores))


class TemplateEnumeration:
    """A bounded space in template (or offered) order with uniform scores."""

    def rank(self, coordinate: str, context: PredictionContext) -> list[RankedCandidate]:
        """The enumerable candidates, minus the excluded ones."""
        skip = set(context.exclude)
        return ranked((c, 1.0) for c in context.candidates if c not in skip)


class FrequencyPrior:
    """Per-coordinate selection frequencies, learned online and Laplace-smoothed.

    p(c) = (n_c + alpha) / (N + alpha * |U|) over the universe U: the enumerable space when there
    is one, else the coordinate's past selections. A user's next action follows such a prior
    (dynbranch §2.1). Memory is bounded: past ``max_per_coordinate`` distinct candidates the
    least selected one is forgotten.
    """

    def __init__(self, alpha: float = 1.0, max_per_coordinate: int = 4096) -> None:
        if alpha <= 0:
            raise InvalidArgument("alpha", "must be > 0")
        self.alpha = alpha
        self.max_per_coordinate = max_per_coordinate
        self._counts: dict[str, Counter[str]] = {}

    def observe(self, coordinate: str, selected: str) -> None:
        """Record that the branch at ``coordinate`` selected ``selected``."""
        counts = self._counts.setdefault(coordinate, Counter())
        counts[selected] += 1
        if len(counts) > self.max_per_coordinate:
            del counts[min(counts, key=counts.__getitem__)]

    def count(self, coordinate: str, candidate: str) -> int:
        """How often ``candidate`` was selected at ``coordinate``."""
        return self._counts.get(coordinate, Counter())[candidate]

    def rank(self, coordinate: str, context: PredictionContext) -> list[RankedCandidate]:
        """The universe ordered by smoothed frequency; ties keep template order."""
        counts = self._counts.get(coordinate, Counter())
        skip = set(context.exclude)
        universe = [c for c in (context.candidates or tuple(counts)) if c not in skip]
        total = sum(counts[c] for c in universe) + self.alpha * len(universe)
        order = sorted(universe, key=lambda c: -counts[c])  # stable: ties keep template order
        return ranked((c, (counts[c] + self.alpha) / total) for c in order)


class OfferedOptions:
    """HCI: the options the harness offered, ranked by the frequency prior (no others)."""

    def __init__(self, prior: FrequencyPrior) -> None:
        self.prior = prior

    def rank(self, coordinate: str, context: PredictionContext) -> list[RankedCandidate]:
        """The offered options by prior; nothing when none were offered."""
        return self.prior.rank(coordinate, context) if context.candidates else []

    def observe(self, coordinate: str, selected: str) -> None:
        """Teach the prior the user's pick."""
        self.prior.observe(coordinate, selected)


#: What each entity scores below its mention count per place in ``ObservationEntities``'
#: ranking: enough to tell equal counts apart, far too little to reorder anything.
TIE_STEP = 1e-6


class ObservationEntities:
    """Open vocabulary: entities named in the last observation (dynbranch §2.1, ReAct).

    Its order within one mention count (names of several words first, then the latest
    mention: ``extract_entities``) is a ranking, not an arbitrary order, so each entity scores
    ``TIE_STEP`` per place below its count and no two share a probability. Sharing one,
    admission took them for a tie and learned them as one candidate, though their places are
    selected at different rates: on ReAct's first think, of two names a question mentions
    equally often, the one this order puts second was selected about twice as often as the first,
    and a third after a three-way tie almost never (issue 37), so a tie's rate priced the
    third at 0.19 and the second below its own (a cold controller's rank-1 candidates at 0.73x
    their useful rate).
    """

    def __init__(self, limit: int = 20) -> None:
        self.limit = limit

    def rank(self, coordinate: str, context: PredictionContext) -> list[RankedCandidate]:
        """Capitalized names and quoted titles by mention count, then several words, then
        recency; each place ``TIE_STEP`` below the count."""
        found = extract_entities(context.observation, exclude=context.exclude)
        if context.candidates:
            allowed = set(context.candidates)
            found = [(e, s) for e, s in found if e in allowed]
        return ranked_in_order(found[:self.limit], TIE_STEP)


class LexicalOverlap:
    """Bounded spaces: candidates whose name shares words with the observation (e.g. the request
    a router reads), by the share of the name's words found there. A cheap stand-in for the
    retriever-style API selection the paper cites (dynbranch §2.2: 59–84% with a deployed one).
    Its coverage is measured on a held-out test split of the BFCL requests by
    ``loadgen.arms.leak_guard`` (its weight is chosen on the train split), not quoted here.
    """

    def rank(self, coordinate: str, context: PredictionContext) -> list[RankedCandidate]:
        """Offered or enumerated candidates with any word overlap, best share first."""
        if not context.candidates or not context.observation:
            return []
        seen = _words(context.observation)
        skip = set(context.exclude)
        scored = []
        for c in context.candidates:
            words = _words(c)
            share = len(words & seen) / len(words) if words and c not in skip else 0.0
            if share > 0:
                scored.append((c, share))
        return ranked(sorted(scored, key=lambda cs: -cs[1]))  # stable: ties keep offered order


def _words(text: str) -> set[str]:
    """Lower-case words of 3+ letters, camelCase and snake_case split, plural ``s`` folded."""
    text = re.sub(r"([a-z])([A-Z])", r"\1 \2", text).lower()
    return {w[:-1] if len(w) > 4 and w.endswith("s") else w
            for w in re.split(r"[^a-z0-9]+", text) if len(w) >= 3}


class CompositePredictor:
    """Merges members' rankings by weighted probability and keeps the top ``k``.

    Ties go to the better best rank, then to the earlier member. For a bounded space only
    candidates of that space survive; excluded candidates never do.
    """

    def __init__(self, members: Sequence[tuple[Predictor, float]], k: int = 3) -> None:
        if k < 1:
            raise InvalidArgument("k", "must be >= 1")
        if any(w < 0 for _, w in members):
            raise InvalidArgument("members", "weights must be >= 0")
        self.members = list(members)
        self.k = k

    def rank(self, coordinate: str, context: PredictionContext) -> list[RankedCandidate]:
        """The merged top-``k``; probabilities are shares of the whole merged score."""
        score: dict[str, float] = {}
        best: dict[str, tuple[int, int]] = {}
        for index, (member, weight) in enumerate(self.members):
            for rc in member.rank(coordinate, context) if weight > 0 else ():
                score[rc.candidate] = score.get(rc.candidate, 0.0) + weight * rc.probability
                best[rc.candidate] = min(best.get(rc.candidate, (rc.rank, index)),
                                         (rc.rank, index))
        allowed = set(context.candidates) if context.candidates else None
        skip = set(context.exclude)
        keep = [c for c in score if c not in skip and (allowed is None or c in allowed)]
        total = sum(score[c] for c in keep)
        keep.sort(key=lambda c: (-score[c], best[c]))
        return [RankedCandidate(c, i, score[c] / total if total > 0 else 1.0 / len(keep))
                for i, c in enumerate(keep[:self.k])]

    def observe(self, coordinate: str, selected: str) -> None:
        """Forward a resolved selection to every member that learns."""
        for member, _ in self.members:
            if hasattr(member, "observe"):
                member.observe(coordinate, selected)


def default_predictor(k: int = 3, extra: Sequence[tuple[Predictor, float]] = (),
                      overlap_weight: float = 2.0) -> CompositePredictor:
    """Prior + enumeration + word overlap with the observation for bounded spaces, observation
    entities (+ prior) for open ones.

    ``extra`` members join the merge after these, e.g. corpus titles (``titles``).
    ``overlap_weight`` is the word-overlap member's weight; ``loadgen.arms.leak_guard.fit``
    chooses it on a train split of the BFCL requests, never on the requests it is measured on.
    """
    prior = FrequencyPrior()
    return CompositePredictor(
        [(prior, 1.0), (TemplateEnumeration(), 0.25), (ObservationEntities(), 1.0),
         (LexicalOverlap(), overlap_weight), *extra], k=k)


# --- entity extraction -----------------------------------------------------------------------

#: Capitalized words that open sentences or clauses but do not name anything.
_LEAD = frozenset([
    "A", "An", "The", "In", "On", "At", "As", "By", "For", "From", "After", "Before", "During",
    "When", "While", "His", "Her", "Its", "Their", "This", "That", "These", "Those", "It",
    "He", "She", "They", "We", "I", "You", "But", "And", "Or", "If", "Although", "Since",
    "Following", "Despite", "With", "Of", "To", "Upon", "Under", "Between", "According",
    "Also", "However", "Then", "There", "Here", "Some", "Many", "Most",
])
_MONTHS = frozenset([
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
])
_CONNECT = r"of|the|de|del|della|di|da|du|des|la|le|von|van|der|den|y|bin|al|for"
_CAP = r"(?:(?:[A-ZÀ-ÖØ-Þ]\.){2,}|[A-ZÀ-ÖØ-Þ][\w'’\-]*\w|[A-ZÀ-ÖØ-Þ])"
_NAME = re.compile(rf"(?<![\w'’]){_CAP}(?:[ \t]+(?:(?:{_CONNECT})[ \t]+)*(?:{_CAP}|\d+\b))*")
_QUOTED = re.compile(r"\"([^\"\n]{2,80})\"|“([^”\n]{2,80})”")
_POSSESSIVE = re.compile(r"['’]s?$")
_PARENTHETICAL = re.compile(r"\s*\([^)]*\)\s*$")


def extract_entities(text: str, exclude: Sequence[str] = ()) -> list[tuple[str, float]]:
    """Entities named in ``text`` with scores, best first.

    Candidates are quoted titles and runs of capitalized words (joined by name particles such as
    "of" or "van"). A shorter mention contained in a longer name ("Peart" in "Neil Peart") counts
    for the longer one; a lone capitalized word that opens a sentence counts only that way. Anything
    contained in an excluded string (e.g. the entity just searched) is skipped. Ties go to the
    entity of several words, then to the one mentioned last.
    """
    counts: Counter[tuple[str, ...]] = Counter()
    last: dict[tuple[str, ...], int] = {}
    form: dict[tuple[str, ...], str] = {}
    strong: set[tuple[str, ...]] = set()
    for words, position, weak in _mentions(text):
        key = tuple(w.casefold() for w in words)
        counts[key] += 1
        last[key] = position
        form.setdefault(key, " ".join(words))
        strong |= set() if weak else {key}
    excluded = [tuple(_PARENTHETICAL.sub("", x).casefold().split()) for x in exclude]
    keys = [k for k in counts if not any(_contains(x, k) for x in excluded)]
    score = _fold_partial_mentions(keys, counts, last)
    score.update({k: 0.0 for k in keys if k not in strong})  # unfolded weak mentions
    keys = [k for k in keys if score[k] > 0]
    keys.sort(key=lambda k: (-score[k], -(len(k) > 1), -last[k]))
    return [(form[k], score[k]) for k in keys]


def _mentions(text: str) -> Iterable[tuple[list[str], int, bool]]:
    """``(words, position, weak)`` per mention; weak: a lone word opening a sentence."""
    quoted = []
    for m in _QUOTED.finditer(text):
        quoted.append(m.span())
        yield (m.group(1) or m.group(2)).split(), m.start(), False
    for m in _NAME.finditer(text):
        if any(a <= m.start() < b for a, b in quoted):
            continue
        words, dropped = m.group(0).split(), 0
        while words and (words[0] in _LEAD or words[0][0].isdigit()):
            words, dropped = words[1:], dropped + 1
        if not words or words[0] in _MONTHS:
            continue
        words[-1] = _POSSESSIVE.sub("", words[-1])
        if len(" ".join(words)) >= 2:
            weak = len(words) == 1 and not dropped and _opens_sentence(text, m.start())
            yield words, m.start(), weak


def _opens_sentence(text: str, start: int) -> bool:
    i = start - 1
    while i >= 0 and text[i] in " \t":
        i -= 1
    return i < 0 or text[i] in ".!?:\n"


def _contains(big: tuple[str, ...], small: tuple[str, ...]) -> bool:
    n = len(small)
    return n > 0 and any(big[i:i + n] == small for i in range(len(big) - n + 1))


def _fold_partial_mentions(keys: list[tuple[str, ...]], counts: Counter[tuple[str, ...]],
                           last: dict[tuple[str, ...], int]) -> dict[tuple[str, ...], float]:
    score = {k: float(counts[k]) for k in keys}
    for k in keys:
        longer = [o for o in keys if len(o) > len(k) and _contains(o, k)]
        if longer:
            target = max(longer, key=lambda o: (counts[o], last[o]))
            score[target] += counts[k]
            last[target] = max(last[target], last[k])
            score[k] = 0.0
    return score


__all__ = [
    "TIE_STEP", "CompositePredictor", "FrequencyPrior", "LexicalOverlap", "ObservationEntities",
    "OfferedOptions",
    "PredictionContext", "Predictor", "TemplateEnumeration", "context_for",
    "default_predictor", "extract_entities", "ranked", "ranked_in_order",
]
