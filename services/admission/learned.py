"""What the priced controller learns per branch class, as records that outlive a restart:
selection posteriors, usability, gains, costs and each rank's calibration (``ClassStats``),
written as plain values (``class_records``), read back by version (``dropped_parts``,
``read_class``), and a restored selection scaled down to a prior (``discount``).
``core.PricedController`` learns into them; ``state_store`` keeps them on disk."""

from __future__ import annotations

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
    ``core.selection_key``, as [selected, predicted]), so that a bin's prior can leave its own
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

    #: Selection posteriors by ``core.selection_key`` (rank, probability bin and visit).
    selection: dict[str, Beta] = field(default_factory=dict)
    usability: Beta = field(default_factory=Beta)
    #: Per pricing class: realised savings of consumed fills (ms), their ratio to the gateway's
    #: projection, and the engine seconds a fill costs.
    gain_ms: dict[str, Mean] = field(default_factory=dict)
    gain_ratio: dict[str, Mean] = field(default_factory=dict)
    cost_s: dict[str, Mean] = field(default_factory=dict)
    #: Per rank (and visit: ``core.calibration_key``): how often its candidates were selected
    #: against the predictor's probabilities summed (in probability units), and each bin's part.
    calibration: dict[str, SelectionCalibration] = field(default_factory=dict)


#: Version of ``PricedController.state``'s layout (3: Action 0's context has four entries;
#: 4: selection posteriors keyed by rank and probability bin; 5: and by visit after the first;
#: 6: each rank's calibration keeps its bins' parts).
STATE_VERSION = 6
#: Older versions taken in part, and the parts dropped (``dropped_parts``).
PARTIAL_VERSIONS: dict[int, tuple[str, ...]] = {2: ("gate", "selection"), 3: ("selection",),
                                                4: (), 5: ()}


def dropped_parts(state: Mapping[str, Any]) -> tuple[str, ...]:
    """The parts of ``state`` its version learned differently, to be dropped: version 2's gate
    models conditioned on fills running and recent consumption, which Action 0 no longer reads
    (``generation_gate.context``), so those classes' gates start cold; versions 2 and 3 learned
    selection by probability bin alone (learned again by rank and bin); version 4 pooled a
    coordinate's visits, and its posteriors are taken as first visits' (later visits learn from
    their prior); version 5 kept no bin's part of a rank's calibration, so its restored
    calibrations are taken whole as the prior of every bin (the bins learned after the restore
    are left out of their own). Another version is an ``InvalidArgument``."""
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


__all__ = ["PARTIAL_VERSIONS", "STATE_VERSION", "Beta", "ClassStats", "Mean",
           "SelectionCalibration", "class_records", "discount", "dropped_parts", "read_class"]
