"""The priced controller's learned records (``learned``): written as plain values and read
back, a record of another shape or version refused by name, and restored evidence scaled down
to a prior with its rates kept."""

from __future__ import annotations

import pytest

from services.admission.learned import (
    STATE_VERSION,
    Beta,
    ClassStats,
    Mean,
    SelectionCalibration,
    class_records,
    discount,
    dropped_parts,
    read_class,
)
from services.common.values.errors import InvalidArgument


def _stats() -> ClassStats:
    return ClassStats(selection={"r0p6": Beta(30.0, 10.0), "r1p4v2": Beta(1.0, 3.0)},
                      usability=Beta(5.0, 1.0), gain_ms={"single": Mean(900.0, 3)},
                      gain_ratio={"single": Mean(2.5, 3)}, cost_s={"single": Mean(4.0, 2)},
                      calibration={"0": SelectionCalibration(6.0, 8.0, {"r0p6": [5.0, 6.0],
                                                                         "r0p4": [1.0, 2.0]})})


def test_a_class_reads_back_as_written_and_without_the_parts_its_version_dropped() -> None:
    raw = class_records({"t/c": _stats()})["t/c"]
    assert read_class("t/c", raw) == _stats()
    assert read_class("t/c", raw, dropped=("selection",)).selection == {}
    assert dropped_parts({"version": STATE_VERSION}) == ()
    assert dropped_parts({"version": 5}) == dropped_parts({"version": 4}) == ()
    assert dropped_parts({"version": 3}) == ("selection",)
    # version 5 kept no bin's part of a calibration: taken whole, with none
    old = {**raw, "calibration": {"0": {"selected": 6.0, "predicted": 8.0}}}
    assert read_class("t/c", old).calibration == {"0": SelectionCalibration(6.0, 8.0)}


def test_a_record_of_another_shape_or_version_is_refused_by_name() -> None:
    raw = class_records({"t/c": _stats()})["t/c"]
    with pytest.raises(InvalidArgument, match=r"state\.classes\.t/c"):
        read_class("t/c", {**raw, "usability": {"wins": 1}})
    with pytest.raises(InvalidArgument, match=r"state\.classes\.t/c"):
        read_class("t/c", {**raw, "calibration": {"0": {"selected": 1.0, "predicted": 2.0,
                                                        "bins": {"r0p6": [1.0]}}}})
    with pytest.raises(InvalidArgument, match=r"state\.version"):
        dropped_parts({"version": 1})


def test_restored_evidence_is_scaled_down_with_its_rates_kept() -> None:
    st = _stats()
    discount(st, most_observations=8.0, most_predicted=2.0)
    top = st.selection["r0p6"]
    assert (top.success, top.failure) == pytest.approx((6.0, 2.0))
    assert (st.selection["r1p4v2"].success, st.selection["r1p4v2"].failure) == (1.0, 3.0)
    cal = st.calibration["0"]
    assert (cal.selected, cal.predicted) == pytest.approx((1.5, 2.0))
    assert cal.bins == {"r0p6": pytest.approx([1.25, 1.5]), "r0p4": pytest.approx([0.25, 0.5])}
    assert cal.without("r0p6") == pytest.approx((0.25, 0.5))
    assert cal.without("r0p2") == (cal.selected, cal.predicted)  # a bin never seen
    whole = _stats()
    discount(whole, most_observations=0.0, most_predicted=0.0)  # 0: everything kept
    assert whole == _stats()
