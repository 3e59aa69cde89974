"""Recorded Action 1 decisions replayed against the exact oracle (``replay``): a consistency check
of the gate against its own estimates (the greedy solution equals the DP's), and the command
that scores a recorded file."""

from __future__ import annotations

import pytest

from services.admission.core import BranchOutcome, ControllerSettings, PricedController
from tests.admission.test_core import MODEL, proposals, report, tracker_at


def test_recorded_decisions_replay_against_the_exact_oracle() -> None:
    from services.admission.replay import replay

    c = PricedController(tracker_at(running=20),
                         settings=ControllerSettings(audit_rate=0.0, n0=0, max_snapshots=100))
    for i in range(20):
        c.admit(f"b{i}", "r/router", proposals(), MODEL, 100.0)
        c.report(BranchOutcome(f"b{i}", "h1", saved_s=1.5, fill_cost_s=2.0, setup_s=0.0))
    figures = replay(list(c.snapshots))
    assert figures["snapshots"] == 20 and figures["positive"] > 0
    assert 0.0 <= figures["set_match"] <= 1.0
    assert 0.0 < figures["utility_share"] <= 1.0 + 1e-9


async def test_the_service_records_decisions_and_the_replay_command_scores_them(
        tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    import json

    from services.admission import replay as replay_file
    from services.admission.config import AdmissionSettings
    from services.admission.server import build_runtime

    path = tmp_path / "decisions.jsonl"
    runtime = await build_runtime(AdmissionSettings(metrics_port=-1, max_snapshots=50,
                                                    snapshot_path=str(path), n0=0,
                                                    audit_rate=0.0))
    controller = runtime.policy
    assert isinstance(controller, PricedController)
    controller.tracker.observe(report(1, 100.0, running=8), 100.0)
    for i in range(5):
        controller.admit(f"b{i}", "r/router", proposals(), MODEL, 100.0)
    await runtime.start()
    await runtime.shutdown()
    recorded = list(replay_file.read(path))
    assert len(recorded) == 5 and recorded[0].candidates[0].name == "h1"
    assert replay_file.main([str(path)]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["snapshots"] == 5 and 0 <= figures["set_match"] <= 1
    with pytest.raises(Exception, match="snapshot"):
        replay_file.decode('{"candidates": []}')


