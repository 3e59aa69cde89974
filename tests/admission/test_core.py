"""Load-priced admission (C3): the priced controller (``core``): Action 0 over the gate, the
priced fill gate, reservations, feedback and learned state. The load view, the gate itself,
the ledger and the baselines have test modules of their own."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.special import betaincinv

from services.admission.core import (
    BranchOutcome,
    ControllerSettings,
    PricedController,
    Proposal,
    tied_ranks,
)
from services.admission.generation_gate import GenerationGate, context
from services.admission.learned import Beta, Mean, selection_key
from services.admission.load_view import EngineLoad, LoadTracker

MODEL = "m"


def report(seq: int, at: float, running: int = 4, waiting: int = 0, fills: int = 0,
           kv_fill: int = 0, engine: str = "e0") -> EngineLoad:
    return EngineLoad(engine, MODEL, seq, at, running, waiting, max_running=48,
                      kv_blocks_used=100, kv_blocks_total=4096, fill_running=fills,
                      fill_kv_blocks=kv_fill)


def tracker_at(running: int, waiting: int = 0, now: float = 100.0) -> LoadTracker:
    t = LoadTracker(window_s=8.0)
    t.observe(report(1, now, running=running, waiting=waiting), now)
    return t


# --- generation gate -----------------------------------------------------------------------------

def x(envelope: float = 0.2) -> np.ndarray:
    return context(envelope, envelope, 0.0)


def test_a_bounded_cold_branch_admits_at_most_the_cold_fan_out() -> None:
    c = PricedController(tracker_at(running=4),
                         settings=ControllerSettings(audit_rate=0.0, n0=1, cold_fanout=1))
    assert not c.open_branch("b1", "r/router", "", MODEL, 100.0).bounded
    assert len(c.admit("b1", "r/router", proposals(), MODEL, 100.0).admitted) > 1
    assert c.open_branch("b2", "r/router", "", MODEL, 100.0).bounded  # b1 still in flight
    assert c.admit("b2", "r/router", proposals(), MODEL, 100.0).admitted == ("h1",)
    assert c.account()["gate"] == {"cold": 1, "cold_bounded": 1}


def taught(branches: int = 6) -> PricedController:
    """A controller that opened, admitted and settled ``branches`` branches of one class, each
    consuming its top candidate's fill."""
    c = PricedController(tracker_at(running=4), settings=ControllerSettings(audit_rate=0.0))
    for i in range(branches):
        c.open_branch(f"b{i}", "r/router", "t/r/router", MODEL, 100.0)
        c.admit(f"b{i}", "r/router", proposals(), MODEL, 100.0)
        c.report(BranchOutcome(f"b{i}", "h1", saved_s=3.0, fill_cost_s=2.0, setup_s=0.01,
                               consumed=(f"fill/b{i}/h1/0",)))
    return c


def test_learned_state_survives_a_restart(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from services.admission import state_store

    c = taught()
    path = tmp_path / "state.json"
    state_store.save(path, c.state())
    whole = ControllerSettings(audit_rate=0.0, restored_selection=0.0, restored_calibration=0.0)
    again = PricedController(tracker_at(running=4), settings=whole)
    assert again.restore(state_store.load(path) or {}) == 1
    assert again.gate.classes["t/r/router"].n == 6  # warm at once: no cold trials
    assert again.open_branch("n", "r/router", "t/r/router", MODEL, 100.0).kind == "priced"
    assert again.stats["t/r/router"] == c.stats["t/r/router"]
    assert state_store.load(tmp_path / "absent.json") is None
    (tmp_path / "bad.json").write_text("[1]")
    with pytest.raises(Exception, match="state_path"):
        state_store.load(tmp_path / "bad.json")
    with pytest.raises(Exception, match="state.version"):
        again.restore({"version": 0})


def test_a_restored_selection_is_a_prior_the_new_branches_outweigh() -> None:
    """Restored selection posteriors keep their rates but at most ``restored_selection``
    observations, each rank's calibration at most ``restored_calibration`` of predicted
    probability; what was learned after the restore is not discounted."""
    c = taught(40)
    again = PricedController(tracker_at(running=4), settings=ControllerSettings(audit_rate=0.0))
    assert again.restore(c.state()) == 1
    before, kept = c.stats["t/r/router"], again.stats["t/r/router"]
    assert max(b.success + b.failure for b in before.selection.values()) == 40
    for key, beta in kept.selection.items():
        old = before.selection[key]
        assert beta.success + beta.failure == pytest.approx(min(8.0, old.success + old.failure))
        assert beta.success / (beta.success + beta.failure) == pytest.approx(
            old.success / (old.success + old.failure))
    for rank, cal in kept.calibration.items():
        old = before.calibration[rank]
        assert cal.predicted == pytest.approx(min(2.0, old.predicted))
        assert cal.selected / cal.predicted == pytest.approx(old.selected / old.predicted)
    # the first branches after the restore move p̃ as far as 8 observations allow, not 40
    p_before = again.selection_estimate(kept, 0, 0.6)
    for i in range(4):
        again.open_branch(f"n{i}", "r/router", "t/r/router", MODEL, 100.0)
        again.admit(f"n{i}", "r/router", proposals(), MODEL, 100.0)
        again.report(BranchOutcome(f"n{i}", "zz", saved_s=0.0, fill_cost_s=0.0, setup_s=0.01))
    assert again.selection_estimate(kept, 0, 0.6) < p_before - 0.15
    top = kept.selection[selection_key(0, 0.6)]
    assert (top.success, top.failure) == pytest.approx((8.0, 4.0))


def test_a_version_4_state_is_taken_whole_as_first_visits() -> None:
    """Version 4 pooled a coordinate's visits: its posteriors are taken as first visits'."""
    c = taught()
    again = PricedController(tracker_at(running=4), settings=ControllerSettings(
        audit_rate=0.0, restored_selection=0.0, restored_calibration=0.0))
    assert again.restore({**c.state(), "version": 4}) == 1
    assert again.stats["t/r/router"] == c.stats["t/r/router"]
    assert all("v" not in key for key in again.stats["t/r/router"].selection)


@pytest.mark.parametrize("version", [2, 3])
def test_an_older_state_is_taken_without_what_it_learned_differently(version: int) -> None:
    """Version 2's gate models read fills running and consumption: dropped (cold again);
    versions 2 and 3 learned selection by probability bin alone: dropped; usability, gains,
    costs and calibration kept."""
    c = taught()
    gate = ({"t/r/router": {"a": [[1.0] * 6] * 6, "q": [0.0] * 6, "n": 9, "sum_sq": 1.0}}
            if version == 2 else c.state()["gate"])
    old = {**c.state(), "version": version, "gate": gate}
    again = PricedController(tracker_at(running=4), settings=ControllerSettings(
        audit_rate=0.0, restored_selection=0.0, restored_calibration=0.0))
    assert again.restore(old) == 1
    kept, before = again.stats["t/r/router"], c.stats["t/r/router"]
    assert before.selection and not kept.selection
    assert dataclasses.replace(kept, selection=before.selection) == before
    assert bool(again.gate.classes) == (version == 3)
    kind = again.open_branch("n", "r/router", "t/r/router", MODEL, 100.0).kind
    assert (kind == "cold") == (version == 2)


def test_action_0_reads_no_load_it_causes_itself() -> None:
    """Fills running follow the gate's own answers (a closed gate runs none): the context
    Action 0 decides on is the same whatever they are, so a gate cannot close itself for good
    by the load its closing removes (nor does it keep the share of branches that consumed a
    fill, which a closed gate holds at zero)."""
    seen = []
    for fills in (0, 6):
        t = tracker_at(running=8)
        c = PricedController(t, settings=ControllerSettings(audit_rate=0.0, n0=0))
        for i in range(fills):
            t.reserve(MODEL, f"f{i}", 16)
        decide = c.gate.decide
        c.gate.decide = lambda name, branch_id, x, d=decide: (seen.append(x.tolist()),  # type: ignore[method-assign]
                                                              d(name, branch_id, x))[1]
        c.open_branch("b", "r/router", "t/r/router", MODEL, 100.0)
    assert len(seen) == 2 and seen[0] == seen[1]


def test_delayed_feedback_revises_a_target_without_adding_a_sample() -> None:
    g = GenerationGate(n0=1, audit_rate=0.0)
    g.decide("c", "b1", x())
    assert g.settle("c", "b1", -500.0)
    a, n = g.classes["c"].a.copy(), g.classes["c"].n
    assert g.settle("c", "b1", 800.0)  # a later report for the same branch
    assert n == g.classes["c"].n == 1 and np.array_equal(a, g.classes["c"].a)
    assert g.classes["c"].q @ np.linalg.inv(a) @ x() > 0  # the revised target counts
    assert not g.settle("c", "unknown", 1.0)


def test_a_class_that_keeps_paying_setup_for_nothing_closes_its_gate_and_audits_reopen_it(
        ) -> None:
    g = GenerationGate(n0=3, audit_rate=0.2, seed=1)
    for i in range(40):  # the predictor costs 300 ms and nothing is ever consumed
        d = g.decide("c", f"b{i}", x())
        if d.open:
            g.settle("c", f"b{i}", -300.0)
    closed = [g.decide("c", f"q{i}", x()) for i in range(200)]
    refused = [d for d in closed if not d.open]
    audits = [d for d in closed if d.audit]
    assert len(refused) > 120 and audits and all(d.open for d in audits)
    for i, d in enumerate(closed):  # conditions change: the audited branches now pay off
        if d.open:
            g.settle("c", f"q{i}", 3000.0)
    reopened = [g.decide("c", f"r{i}", x()).open for i in range(20)]
    assert sum(reopened) >= 19


# --- priced fill gate ----------------------------------------------------------------------------

def proposals() -> list[Proposal]:
    return [Proposal("h1", 0, 0.6, est_exec_s=2.0, est_gain_s=2.0),
            Proposal("h2", 1, 0.25, est_exec_s=2.0, est_gain_s=2.0),
            Proposal("h3", 2, 0.1, est_exec_s=2.0, est_gain_s=2.0)]


def controller(t: LoadTracker) -> PricedController:
    return PricedController(t, settings=ControllerSettings(audit_rate=0.0, n0=0))


def test_the_same_candidate_is_admitted_under_headroom_and_refused_under_contention() -> None:
    one = proposals()[:1]
    idle = controller(tracker_at(running=4)).admit("b1", "r/router", one, MODEL, 100.0)
    busy = controller(tracker_at(running=48, waiting=30)).admit("b1", "r/router", one, MODEL,
                                                                100.0)
    assert idle.admitted == ("h1",) and busy.admitted == ()
    assert busy.load_price > idle.load_price


def test_the_admission_carries_each_candidates_price_as_the_ledger_records_it() -> None:
    c = controller(tracker_at(running=4))
    c.open_branch("b1", "r/router", "acme/r/router", MODEL, 100.0)
    got = c.admit("b1", "r/router", proposals(), MODEL, 100.0)
    priced = dict(got.priced)
    assert list(priced) == ["h1", "h2", "h3"]
    assert tuple(n for n, p in priced.items() if p.admitted) == got.admitted != ()
    assert priced["h1"].p > priced["h2"].p > priced["h3"].p
    assert all(p.gain_ms > 0 and p.cost_ms > 0 for p in priced.values())
    assert priced == c.ledger.entries["b1"].candidates  # one record, two readers
    closed = c.admit("b2", "r/router", proposals(), MODEL, 100.0, window_s=-1.0)
    assert closed.priced == () and closed.admitted == ()


def test_admissions_are_reserved_and_released_when_the_branch_settles() -> None:
    t = tracker_at(running=4)
    c = controller(t)
    free = t.snapshot(MODEL, 100.0).fill_slots_free
    got = c.admit("b1", "r/router", proposals(), MODEL, 100.0)
    assert got.admitted and t.snapshot(MODEL, 100.0).fill_slots_free == free - len(got.admitted)
    assert c.report(BranchOutcome("b1", "h1", saved_s=1.5, fill_cost_s=2.0, setup_s=0.0))
    assert t.snapshot(MODEL, 100.0).fill_slots_free == free
    assert not c.report(BranchOutcome("b1", "h1", 1.0, 1.0, 0.0))  # settled once


def test_selection_learns_per_probability_bin_and_usability_only_from_admitted_selected_fills(
        ) -> None:
    c = controller(tracker_at(running=4))
    for i in range(30):  # the rank-1 candidate is always the one selected
        c.admit(f"b{i}", "r/router", proposals(), MODEL, 100.0)
        c.report(BranchOutcome(f"b{i}", "h2", saved_s=1.5, fill_cost_s=2.0, setup_s=0.0,
                         consumed=(f"fill/b{i}/h2/0",)))
    st = c.stats["r/router"]
    h1, h2 = selection_key(0, 0.6), selection_key(1, 0.25)  # by rank and probability
    assert st.selection[h2].success == 30 and st.selection[h1].failure == 30
    assert selection_key(3, 0.0) == "r3"  # no probability given: by rank
    assert selection_key(0, 0.15) != selection_key(1, 0.15)  # a runner-up learns apart
    assert c.selection_estimate(st, 1, 0.25) > c.selection_estimate(st, 0, 0.6)
    assert st.usability.success + st.usability.failure <= 30
    assert c.admit("z", "r/router", proposals(), MODEL, 100.0).admitted[0] == "h2"


def test_selection_is_learned_per_visit_to_the_coordinate() -> None:
    """A point visited repeatedly in one workflow is learned per visit: a third visit whose
    candidates are never selected (a ReAct agent answering) prices its top candidate low
    while first visits, selected every time, keep theirs; first visits keep the keys (and so
    the restored state) they had before visits were told apart."""
    c = PricedController(tracker_at(running=4), settings=ControllerSettings(audit_rate=0.0,
                                                                            n0=0))
    for i in range(10):
        for visit, selected in ((0, "h1"), (2, "")):
            branch = f"b{i}v{visit}"
            c.admit(branch, "r/think", proposals(), MODEL, 100.0, branch_class="t", visit=visit)
            c.report(BranchOutcome(branch, selected, saved_s=0.0, fill_cost_s=0.0,
                                   setup_s=0.01))
    st = c.stats["t"]
    assert selection_key(0, 0.6) in st.selection and selection_key(0, 0.6, 2) == "r0p6v2"
    assert selection_key(0, 0.6, 9) == selection_key(0, 0.6, 3)  # later visits pooled
    assert c.selection_estimate(st, 0, 0.6) > 0.8
    assert c.selection_estimate(st, 0, 0.6, visit=2) < 0.2
    first = dict(c.admit("n0", "r/think", proposals(), MODEL, 100.0, branch_class="t").priced)
    last = dict(c.admit("n2", "r/think", proposals(), MODEL, 100.0, branch_class="t",
                        visit=2).priced)
    assert first["h1"].p_sel > 0.8 > 0.2 > last["h1"].p_sel
    # a rank's calibration (the prior of bins not seen yet) is kept per visit as well
    assert c.calibrated(st, 0, 0.4, visit=2) < 0.15 < 0.4 < c.calibrated(st, 0, 0.4)


def test_a_bins_prior_is_calibrated_on_the_other_bins_of_its_rank() -> None:
    """A rank's calibration is the prior of each of its bins, less the bin's own observations:
    those are the posterior's counts already. Ten unselected rank-1 candidates in one bin count
    once there (its prior stays the predictor's 0.25) and calibrate the rank's other bins."""
    c = controller(tracker_at(running=4))
    for i in range(10):
        c.admit(f"b{i}", "r/router", proposals(), MODEL, 100.0)
        c.report(BranchOutcome(f"b{i}", "h1", saved_s=0.0, fill_cost_s=0.0, setup_s=0.0))
    st = c.stats["r/router"]
    cal = st.calibration["1"]
    assert (cal.selected, cal.predicted) == pytest.approx((0.0, 2.5))
    assert cal.without(selection_key(1, 0.25)) == pytest.approx((0.0, 0.0))
    assert c.calibrated(st, 1, 0.25) == pytest.approx(0.25)  # its own bin: left out
    assert c.calibrated(st, 1, 0.15) == pytest.approx(0.15 * 2.0 / 4.5)  # another bin
    w = c.settings.prior_weight  # Beta(w 0.25, w 0.75) and the bin's 10 failures, once
    assert c.selection_estimate(st, 1, 0.25) == pytest.approx(
        float(betaincinv(w * 0.25, w * 0.75 + 10, 0.5)))
    # the restored state keeps each bin's part, scaled with its rank's calibration
    again = controller(tracker_at(running=4))
    again.restore(c.state())
    kept = again.stats["r/router"].calibration["1"]
    assert kept.predicted == pytest.approx(2.0)
    assert kept.without(selection_key(1, 0.25)) == pytest.approx((0.0, 0.0))
    assert again.calibrated(again.stats["r/router"], 1, 0.25) == pytest.approx(0.25)


def test_candidates_the_predictor_ties_share_their_rank() -> None:
    """Two candidates at the same probability are one rank to selection: whichever of them is
    selected, both keys learn it, and the fill gate takes the first of two equal estimates (as
    top 1 would) instead of the one that happened to win the last few branches."""
    tie = [Proposal("a", 0, 0.4, est_exec_s=2.0, est_gain_s=2.0),
           Proposal("b", 1, 0.4, est_exec_s=2.0, est_gain_s=2.0),
           Proposal("c", 2, 0.2, est_exec_s=2.0, est_gain_s=2.0)]
    assert tied_ranks(tie) == {"a": (0, True), "b": (0, True), "c": (2, False)}
    assert tied_ranks([Proposal("x", 0, 0.0), Proposal("y", 1, 0.0)]) == {
        "x": (0, False), "y": (1, False)}
    c = controller(tracker_at(running=4))
    for i in range(6):  # the second of the tie wins every time
        c.admit(f"b{i}", "r/router", tie, MODEL, 100.0)
        c.report(BranchOutcome(f"b{i}", "b", saved_s=2.0, fill_cost_s=4.0, setup_s=0.0,
                               consumed=(f"fill/b{i}/b/0",)))
    st = c.stats["r/router"]
    assert st.selection[selection_key(0, 0.4, tied=True)] == Beta(6.0, 6.0)
    assert selection_key(1, 0.4, tied=True) not in st.selection and "1t" not in st.calibration
    admission = c.admit("n", "r/router", tie, MODEL, 100.0)
    priced = dict(admission.priced)
    assert priced["a"].p_sel == priced["b"].p_sel > priced["c"].p_sel
    assert admission.admitted[0] == "a"
    assert priced["b"].rank == 1  # the ledger keeps the gateway's rank


def test_the_selection_estimate_is_the_posterior_median_or_its_mean() -> None:
    """p̃'s selection factor is its posterior's median by default: with no evidence it
    discounts a low-probability candidate (0.05 priced below 0.01, so a costly fill of it is
    left out), which the mean (``selection_quantile=None``) prices at the predictor's
    probability itself; both learn it down once its rank is not selected."""
    unlikely = [Proposal("h1", 0, 0.9, est_exec_s=2.0, est_gain_s=20.0),
                Proposal("h3", 2, 0.05, est_exec_s=2.0, est_gain_s=20.0)]  # cost ~2% of G
    median = controller(tracker_at(running=4))
    mean = PricedController(tracker_at(running=4), settings=ControllerSettings(
        audit_rate=0.0, n0=0, selection_quantile=None))
    assert median.selection_estimate(median._stats("r/router"), 2, 0.05) < 0.01
    for p in (0.02, 0.05, 0.3, 0.7):
        assert mean.selection_estimate(mean._stats("r/router"), 2, p) == pytest.approx(p)
    assert median.admit("b0", "r/router", unlikely, MODEL, 100.0).admitted == ("h1",)
    assert mean.admit("b0", "r/router", unlikely, MODEL, 100.0).admitted == ("h1", "h3")
    for c in (median, mean):
        for i in range(20):
            c.admit(f"b{i + 1}", "r/router", unlikely, MODEL, 100.0)
            c.report(BranchOutcome(f"b{i + 1}", "h1", saved_s=2.0, fill_cost_s=2.0,
                                   setup_s=0.0))
        assert c.selection_estimate(c.stats["r/router"], 2, 0.05) < 0.02


def test_a_selected_fill_not_consumed_fails_use_and_charges_only_the_work_it_did() -> None:
    """A selected fill that was not consumed was not useful, whether it ran and went unused or
    did no engine work (still queued when its demand came, or answered by the library): each
    fails usability, the event p̃ estimates. Only one that ran charges Action 0 its price."""
    c = PricedController(tracker_at(running=8),
                         settings=ControllerSettings(audit_rate=0.0, n0=4))
    for i, cost in enumerate((0.0, 0.0, 2.0)):
        assert c.open_branch(f"b{i}", "r/router", "", MODEL, 100.0).open  # cold trials
        assert c.admit(f"b{i}", "r/router", proposals()[:1], MODEL, 100.0).admitted == ("h1",)
        c.report(BranchOutcome(f"b{i}", "h1", saved_s=0.0, fill_cost_s=cost, setup_s=0.0))
    st = c.stats["r/router"]
    assert (st.usability.success, st.usability.failure) == (0, 3)
    trials = c.gate.classes["r/router"].trials
    assert trials["b0"].target == 0.0 and trials["b2"].target < 0.0


def test_bounded_branch_records() -> None:
    c = PricedController(tracker_at(running=4),
                         settings=ControllerSettings(audit_rate=0.0, n0=0, max_branches=10))
    for i in range(50):
        c.admit(f"b{i}", "r/router", proposals(), MODEL, 100.0)
    assert len(c.branches) == 10
    assert c.tracker.snapshot(MODEL, 100.0).fill_slots_free > 0  # forgotten ones released


def test_a_provisional_report_ends_the_trial_and_the_final_one_revises_it() -> None:
    c = PricedController(tracker_at(running=4),
                         settings=ControllerSettings(audit_rate=0.0, n0=2))
    assert c.open_branch("b1", "r/router", "", MODEL, 100.0).open
    c.admit("b1", "r/router", proposals(), MODEL, 100.0)
    assert c.gate.classes["r/router"].pending == 1
    assert c.report(BranchOutcome("b1", "h1", saved_s=0.0, fill_cost_s=0.0, setup_s=0.01,
                            final=False))
    trial = c.gate.classes["r/router"].trials["b1"]
    assert c.gate.classes["r/router"].pending == 0 and trial.target is not None
    provisional = trial.target
    assert c.stats["r/router"].usability.success == 0  # not yet known
    assert c.report(BranchOutcome("b1", "h1", saved_s=3.0, fill_cost_s=2.0, setup_s=0.01,
                            consumed=("fill/b1/h1/0", "fill/b1/h1/1")))
    assert trial.target > provisional and c.stats["r/router"].usability.success == 1
    assert c.gate.classes["r/router"].n == 1  # revised, not a second sample
    assert not c.report(BranchOutcome("b1", "h1", saved_s=3.0, fill_cost_s=2.0, setup_s=0.01))


def test_admission_only_while_the_resolution_window_remains() -> None:
    t = tracker_at(running=8)  # some canonical load: fills have a price
    c = controller(t)
    wide = c.admit("b1", "r/router", proposals()[:1], MODEL, 100.0, window_s=10.0)
    narrow = controller(tracker_at(running=8)).admit("b2", "r/router", proposals()[:1], MODEL,
                                                      100.0, window_s=0.05)
    closed = controller(tracker_at(running=4)).admit("b3", "r/router", proposals()[:1], MODEL,
                                                     100.0, window_s=-1.0)
    assert wide.admitted == ("h1",)
    assert narrow.admitted == ()  # 50 ms of overlap does not pay for the fill's price
    assert closed.admitted == () and "closed" in closed.reason


def test_the_decode_pace_projects_the_remaining_window_in_engine_seconds() -> None:
    from services.gateway.pace import DecodePace

    pace = DecodePace()
    assert pace.window_s("m", 100, 0.0) == 0.0  # nothing known yet
    pace.observe("m", wall_s=0.2, engine_s=10.0, tokens=100)  # a sim at time_scale 0.02
    assert pace.window_s("m", 256, 0.112) == pytest.approx((256 * 0.002 - 0.112) * 50)
    assert pace.window_s("m", 256, 1.0) == -1.0  # the decision is past its projected end


def test_credit_requires_the_consumed_entry_to_name_the_admitted_producer() -> None:
    c = controller(tracker_at(running=4))
    c.admit("b1", "r/router", proposals(), MODEL, 100.0)
    c.report(BranchOutcome("b1", "h1", saved_s=3.0, fill_cost_s=2.0, setup_s=0.0,
                     consumed=("fill/b9/h1/0",)))  # another branch's fill: no credit
    st = c.stats["r/router"]
    assert "single" not in st.gain_ms and st.usability.failure == 1
    c.admit("b2", "r/router", proposals(), MODEL, 100.0)
    c.report(BranchOutcome("b2", "h1", saved_s=3.0, fill_cost_s=2.0, setup_s=0.0,
                     consumed=("fill/b2/h1/0",)))
    assert st.gain_ms["single"].n == 1 and st.usability.success == 1


def test_the_gateway_client_sends_projected_exec_gain_and_tokens() -> None:
    from services.admission.client import estimate_fields as fields
    from services.common.values.candidates import FillEstimate

    est = {"h1": FillEstimate(4.0, prompt_tokens=850, peak_tokens=1106, stages=1)}
    assert fields("h1", est, window_s=2.5) == {"est_exec_s": 4.0, "est_gain_s": 2.5,
                                                "est_prompt_tokens": 850,
                                                "est_peak_tokens": 1106, "stages": 1}
    assert fields("h1", est, window_s=0.0)["est_gain_s"] == 4.0
    assert fields("h1", est, window_s=-1.0)["est_gain_s"] == 0.0
    assert fields("h2", est, window_s=2.5) == {}  # unknown: nothing sent
    assert fields("h3", {"h3": FillEstimate()}, 1.0) == {"stages": 1}


def test_the_decode_pace_gives_engine_seconds_per_token() -> None:
    from services.gateway.pace import DecodePace

    pace = DecodePace()
    assert pace.engine_s_per_token("m") is None
    pace.observe("m", wall_s=0.2, engine_s=10.0, tokens=100)
    assert pace.engine_s_per_token("m") == pytest.approx(0.1)


def test_a_provisional_report_credits_an_admitted_winner_its_expected_gain() -> None:
    """Fills are consumed after their branch resolves; the resolved (provisional) report must
    not teach Action 0 a loss for every cold trial and close the class until the final reports
    arrive (seen on Sub-Agent: 4 cold trials at -4 ms each, then 30 refusals)."""
    c = PricedController(tracker_at(running=4),
                         settings=ControllerSettings(audit_rate=0.0, n0=1))
    assert c.open_branch("b1", "r/router", "", MODEL, 100.0).open
    admitted = c.admit("b1", "r/router", proposals(), MODEL, 100.0).admitted
    assert "h1" in admitted
    assert c.report(BranchOutcome("b1", "h1", saved_s=0.0, fill_cost_s=0.0, setup_s=0.004,
                            final=False))
    assert c.gate.classes["r/router"].trials["b1"].target > 0
    assert c.open_branch("b2", "r/router", "", MODEL, 100.0).open  # the class stays open
    # a winner that was not admitted is credited nothing
    c.admit("b2", "r/router", proposals(), MODEL, 100.0)
    assert c.report(BranchOutcome("b2", "zz", saved_s=0.0, fill_cost_s=0.0, setup_s=0.004,
                            final=False))
    assert c.gate.classes["r/router"].trials["b2"].target < 0


async def test_the_admission_service_keeps_what_it_learned_across_a_restart(
        tmp_path) -> None:  # type: ignore[no-untyped-def]
    from services.admission.config import AdmissionSettings
    from services.admission.server import build_runtime

    path = tmp_path / "admission-state.json"
    settings = AdmissionSettings(metrics_port=-1, state_path=str(path), state_interval_s=60.0,
                                 audit_rate=0.0, log_level="WARNING", restored_selection=0.0,
                                 restored_calibration=0.0)  # kept whole: the same posteriors
    first = await build_runtime(settings)
    await first.start()
    learned = first.policy
    assert isinstance(learned, PricedController)
    learned.tracker.observe(report(1, 100.0, running=8), 100.0)
    for i in range(6):
        learned.open_branch(f"b{i}", "r/router", "acme/r/router", MODEL, 100.0)
        learned.admit(f"b{i}", "r/router", proposals(), MODEL, 100.0)
        learned.report(BranchOutcome(f"b{i}", "h1", saved_s=3.0, fill_cost_s=2.0, setup_s=0.01,
                               consumed=(f"fill/b{i}/h1/0",)))
    await first.shutdown()  # the close hook saves
    assert path.exists()
    second = await build_runtime(settings)  # a restart reads it back
    restored = second.policy
    assert isinstance(restored, PricedController)
    assert restored.gate.classes["acme/r/router"].n == 6
    assert restored.stats["acme/r/router"] == learned.stats["acme/r/router"]
    await second.start()
    await second.shutdown()


def test_action_1_counts_what_it_left_out_by_cause_and_times_action_0() -> None:
    c = PricedController(tracker_at(running=4),
                         settings=ControllerSettings(audit_rate=0.0, n0=1, cold_fanout=1))
    c.open_branch("b1", "r/router", "", MODEL, 100.0)
    c.open_branch("b2", "r/router", "", MODEL, 101.0)  # bounded: b1 still in flight
    offered = proposals()
    c.admit("b2", "r/router", offered, MODEL, 101.0)
    left = c.account()["not_admitted"]
    assert left.get("cold_bounded", 0) >= 1
    assert sum(left.values()) == len(offered) - 1  # one admitted, the rest counted by why
    assert [(at, opened) for at, opened, _ in c.decisions()] == [(100.0, True), (101.0, True)]


def test_the_learned_gain_ratio_starts_from_the_projection_and_moves_with_evidence() -> None:
    def gain(weight: float, ratios: list[float]) -> float:
        c = PricedController(tracker_at(running=4), settings=ControllerSettings(
            audit_rate=0.0, gain_prior_weight=weight))
        st = c._stats("k")
        for r in ratios:
            st.gain_ratio.setdefault("single", Mean()).add(r)
        return c._gain_ms(st, Proposal("h", 0, 0.5, est_exec_s=4.0, est_gain_s=10.0))

    assert gain(4.0, []) == pytest.approx(10_000.0)  # no evidence: the projection
    assert gain(0.0, [0.1]) == pytest.approx(1_000.0)  # no prior: one low ratio decides
    assert gain(4.0, [0.1]) == pytest.approx(10_000.0 * 4.1 / 5)  # shrunk towards 1
    assert gain(4.0, [0.1] * 400) < 1_200.0  # evidence outweighs the prior


def test_a_tie_learns_apart_from_a_candidate_alone_at_its_rank() -> None:
    """At one rank and probability, a leader the predictor singled out and one it could not
    tell from another are selected at different rates (and a runner-up alone behind the
    leader unlike the tail tied at the floor): each learns its own posterior and its own
    calibration, so neither prices the other."""
    assert selection_key(0, 0.3, tied=True) == "r0tp4" != selection_key(0, 0.3) == "r0p4"
    assert selection_key(1, 0.3, 2, tied=True) == "r1tp4v2"
    sole = [Proposal("a", 0, 0.3, est_exec_s=2.0, est_gain_s=2.0),
            Proposal("b", 1, 0.2, est_exec_s=2.0, est_gain_s=2.0)]
    tie = [Proposal("x", 0, 0.3, est_exec_s=2.0, est_gain_s=2.0),
           Proposal("y", 1, 0.3, est_exec_s=2.0, est_gain_s=2.0),
           Proposal("z", 2, 0.3, est_exec_s=2.0, est_gain_s=2.0)]
    c = controller(tracker_at(running=4))
    for i in range(10):  # the sole leader always wins; in the tie, the last one
        c.admit(f"s{i}", "r/router", sole, MODEL, 100.0)
        c.report(BranchOutcome(f"s{i}", "a", saved_s=0.0, fill_cost_s=0.0, setup_s=0.0))
        c.admit(f"t{i}", "r/router", tie, MODEL, 100.0)
        c.report(BranchOutcome(f"t{i}", "z", saved_s=0.0, fill_cost_s=0.0, setup_s=0.0))
    st = c.stats["r/router"]
    assert st.selection[selection_key(0, 0.3)] == Beta(10.0, 0.0)
    assert st.selection[selection_key(0, 0.3, tied=True)] == Beta(10.0, 20.0)
    assert set(st.calibration) == {"0", "0t", "1"}
    assert c.selection_estimate(st, 0, 0.3) > 0.8  # the sole leader, learned as such
    assert 0.2 < c.selection_estimate(st, 0, 0.3, tied=True) < 0.45  # a third of a tie
