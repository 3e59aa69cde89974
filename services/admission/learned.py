"""What the priced controller learns per branch class, as records that outlive a restart:
selection posteriors, usability, gains, costs and each rank's calibration (``ClassStats``),
keyed by what selection is learned by (``selection_key``, ``calibration_key``),
written as plain values (``class_records``), read back by version (``dropped_parts``,
``read_class``), and a restored selection scaled down to a prior (``discount``).
``core.PricedController`` learns into them; ``state_store`` keeps them on disk."""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from services.common.values.errors import InvalidArgument


@dataclass(slots=True)
class Beta:
    """Counts of a Beta posterior (no prior: the caller adds its own)."""

    success: float = 0.0
    failure: float = 0.0


@dataclass(slots=True)
class Mean:
    """A running mean."""

    total: float = 0.0
    n: int = 0

    def add(self, value: float) -> None:
        self.total, self.n = self.total + value, self.n + 1

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None


@dataclass(slots=True)
class SelectionCalibration:
    """How often candidates were selected against the probability predicted for them, in all
    and per probability bin (``bins``: each selection posterior's part of the sums, by
    ``selection_key``, as [selected, predicted]), so that a bin's prior can leave its own
    observations out (``core.PricedController.calibrated``)."""

    selected: float = 0.0
    predicted: float = 0.0
    bins: dict[str, list[float]] = field(default_factory=dict)

    def add(self, key: str, selected: float, predicted: float) -> None:
        """One candidate's outcome, in the sums and in its bin's part."""
        self.selected += selected
        self.predicted += predicted
        part = self.bins.setdefault(key, [0.0, 0.0])
        part[0] += selected
        part[1] += predicted

    def without(self, key: str) -> tuple[float, float]:
        """(selected, predicted) over every bin but ``key``."""
        part = self.bins.get(key)
        if part is None:
            return self.selected, self.predicted
        return max(self.selected - part[0], 0.0), max(self.predicted - part[1], 0.0)


@dataclass(slots=True)
class ClassStats:
    """What the controller learned of one branch class."""

    #: Selection posteriors by ``selection_key`` (rank, probability bin and visit).
    selection: dict[str, Beta] = field(default_factory=dict)
    usability: Beta = field(default_factory=Beta)
    #: Per pricing class: realised savings of consumed fills (ms), their ratio to the gateway's
    #: projection, and the engine seconds a fill costs.
    gain_ms: dict[str, Mean] = field(default_factory=dict)
    gain_ratio: dict[str, Mean] = field(default_factory=dict)
    cost_s: dict[str, Mean] = field(default_factory=dict)
    #: Per rank (and visit: ``calibration_key``): how often its candidates were selected
    #: against the predictor's probabilities summed (in probability units), and each bin's part.
    calibration: dict[str, SelectionCalibration] = field(default_factory=dict)


#: Edges of the predictor-probability bins the selection posteriors are kept by.
PROBABILITY_BINS = (0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.85)
#: Visits to a coordinate in one workflow learned apart (later ones pooled with the last).
VISITS = 4


def selection_key(rank: int, probability: float, visit: int = 0, tied: bool = False) -> str:
    """What a candidate's selection is learned by: its rank and the bin of the predictor's
    probability ("r1p3": rank 1 at [0.1, 0.2)), or its rank alone ("r1") when the predictor
    gives none (probability 0); whether the predictor gave another candidate the same
    probability ("r0tp4": tied for rank 0); and the branch's visit to its coordinate in its
    workflow, after the first ("r1p3v2": the third visit; visits from the ``VISITS``-th on
    pooled).

    The paper conditions on rank alone; a predictor's probabilities are informative but not
    calibrated (Routing: rank-1 candidates at p < 0.35 were selected 1 time in 59, at p >= 0.4
    7 in 16), and a rank's pooled posterior loses that once it has evidence. Bins pooled over
    ranks lose the rank instead: at one probability the top candidate is chosen far more often
    than a runner-up (issue 37: a warm controller's bins, filled mostly by rank-0 outcomes,
    priced rank-1 candidates at 0.21 against a selection rate of 0.13 and rank-2 at 0.08
    against 0.03), so both condition it. A decision point visited repeatedly in one workflow
    is not the same decision each time either: a ReAct agent's think step picks an entity on
    its first two visits and answers on its third, where none of the predicted candidates is
    selected. Pooled over visits, p̃ overrates the last visit; and under load, where first
    visits settle first, a cold controller's estimates after 48 branches come from first
    visits but price later ones (issue 37: ReAct at 16/s, rank 0 priced at 0.52 where 0.36
    was used). A first visit's key is the one it had before visits were told apart.

    At one rank and probability a candidate the predictor singled out is not one it could not
    tell from another. A tie at the top splits a selection the predictor cannot place; a
    candidate alone behind a leader has lost to it; runners-up tied with each other are the
    tail a predictor gives its floor probability. Pooled, they priced each other (issue 37,
    Routing warm at 2-8/s, 5 seeds: leaders alone at p in [0.2, 0.5) priced at 0.32-0.52
    where 0.79-0.92 were selected; a runner-up alone at 0.19 against 0.04, a sixth of its
    probability, its rank's calibration raised by the runners-up tied with each other,
    selected at about half of theirs: 0.04 at p in [0.05, 0.1)), so a tie learns apart. A
    candidate alone at its rank keeps the key it had before ties were told apart."""
    key = (f"r{rank}{'t' if tied else ''}p{bisect.bisect(PROBABILITY_BINS, probability)}"
           if probability > 0 else f"r{rank}")
    return key + _visit_suffix(visit)


def _visit_suffix(visit: int) -> str:
    visit = min(visit, VISITS - 1)
    return f"v{visit}" if visit > 0 else ""


def calibration_key(rank: int, visit: int = 0, tied: bool = False) -> str:
    """What a rank's calibration is kept by: the rank, whether tied ("0t"), and the visit after
    the first ("1v2"), as ``selection_key`` has them."""
    return f"{rank}{'t' if tied else ''}{_visit_suffix(visit)}"


#: Version of ``PricedController.state``'s layout (3: Action 0's context has four entries;
#: 4: selection posteriors keyed by rank and probability bin; 5: and by visit after the first;
#: 6: each rank's calibration keeps its bins' parts; 7: ties learned apart).
STATE_VERSION = 7
#: Older versions taken in part, and the parts dropped (``dropped_parts``).
PARTIAL_VERSIONS: dict[int, tuple[str, ...]] = {2: ("gate", "selection"), 3: ("selection",),
                                                4: (), 5: (), 6: ()}


def dropped_parts(state: Mapping[str, Any]) -> tuple[str, ...]:
    """The parts of ``state`` its version learned differently, to be dropped: version 2's gate
    models conditioned on fills running and recent consumption, which Action 0 no longer reads
    (``generation_gate.context``), so those classes' gates start cold; versions 2 and 3 learned
    selection by probability bin alone (learned again by rank and bin); version 4 pooled a
    coordinate's visits, and its posteriors are taken as first visits' (later visits learn from
    their prior); version 5 kept no bin's part of a rank's calibration, so its restored
    calibrations are taken whole as the prior of every bin (the bins learned after the restore
    are left out of their own); version 6 pooled ties with the candidates alone at their rank,
    and its posteriors are taken as the latter's (ties learn from their prior). Another version
    is an ``InvalidArgument``."""
    version = state.get("version")
    if version not in (STATE_VERSION, *PARTIAL_VERSIONS):
        raise InvalidArgument("state.version", f"expected {STATE_VERSION}, got {version!r}")
    return PARTIAL_VERSIONS.get(version, ())


def class_records(stats: Mapping[str, ClassStats]) -> dict[str, Any]:
    """Every class's learned state as plain values (``read_class`` reads one back)."""
    return {name: asdict(st) for name, st in stats.items()}


def read_class(name: str, raw: Mapping[str, Any], dropped: tuple[str, ...] = ()) -> ClassStats:
    """A class written by ``class_records``, without the ``dropped`` parts; a record of another
    shape is an ``InvalidArgument`` naming the class."""
    try:
        selection = {} if "selection" in dropped else raw["selection"]
        return ClassStats(
            selection={str(k): Beta(**v) for k, v in selection.items()},
            usability=Beta(**raw["usability"]),
            gain_ms={k: Mean(**v) for k, v in raw["gain_ms"].items()},
            gain_ratio={k: Mean(**v) for k, v in raw["gain_ratio"].items()},
            cost_s={k: Mean(**v) for k, v in raw["cost_s"].items()},
            calibration={k: _calibration(v) for k, v in raw.get("calibration", {}).items()})
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise InvalidArgument(f"state.classes.{name}", f"not a class record: {exc}") from None


def _calibration(raw: Mapping[str, Any]) -> SelectionCalibration:
    bins = {str(k): [float(part[0]), float(part[1])] for k, part in raw.get("bins", {}).items()}
    return SelectionCalibration(float(raw["selected"]), float(raw["predicted"]), bins)


def discount(st: ClassStats, most_observations: float, most_predicted: float) -> None:
    """Scale restored evidence down to at most ``most_observations`` per selection posterior
    and ``most_predicted`` predicted probability per calibration, rates kept (a power prior;
    0: all kept)."""
    for beta in st.selection.values():
        total = beta.success + beta.failure
        if most_observations > 0 and total > most_observations:
            scale = most_observations / total
            beta.success, beta.failure = beta.success * scale, beta.failure * scale
    for cal in st.calibration.values():
        if most_predicted > 0 and cal.predicted > most_predicted:
            scale = most_predicted / cal.predicted
            cal.selected, cal.predicted = cal.selected * scale, most_predicted
            cal.bins = {k: [v * scale for v in part] for k, part in cal.bins.items()}


__all__ = ["PARTIAL_VERSIONS", "PROBABILITY_BINS", "STATE_VERSION", "VISITS", "Beta",
           "ClassStats", "Mean", "SelectionCalibration", "calibration_key", "class_records",
           "discount", "dropped_parts", "read_class", "selection_key"]
