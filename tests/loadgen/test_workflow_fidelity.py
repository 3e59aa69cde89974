"""The workflow-level fidelity bench's sim side and its arithmetic (the real-engine side runs in
``dynbranch bench workflow-fidelity`` and, at toy size, in tests/real_engine/test_gpu_check.py),
and the report's "On a real engine" section read from the results files."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.bench import workflow_fidelity as wf
from loadgen.bench.fidelity import committed_preset
from loadgen.report.real_engine import latest, record, section
from services.engine_agent.sim.cost_model import register_preset


@pytest.fixture(scope="module")
def predicted() -> dict[str, Any]:
    """Routing's floor and full on the sim with the committed tiny preset, outputs to the cap."""
    preset = dataclasses.replace(committed_preset(), name="test-tiny-fit", max_model_len=4096)
    register_preset(preset, replace=True)
    return asyncio.run(wf._predict("routing", wf.ComparisonPlan(2, seeds=1, preset=preset.name)))


def test_the_sim_runs_every_engine_call_to_its_cap_as_the_tiny_model_does(
        predicted: dict[str, Any]) -> None:
    calls = predicted["arms"]["floor"]["engine_calls"]
    # Routing's stages cap at 320 and 256 tokens: at the cap, never the sim's own 32-512 draw
    assert 256 <= calls["completion_tokens"] <= 320
    assert calls["prompt_tokens"] > 0 and calls["tpot_ms"] > 0


def test_the_engine_side_reports_what_the_engine_said_beside_the_mesh(
        predicted: dict[str, Any]) -> None:
    side = wf._engine_side(predicted)
    assert side["outside_ms_per_call"]["no_fills"] > 0  # the virtual mesh's hops
    assert side["tpot_ms"]["no_fills"] > 0 and side["tpot_ms"]["fills"] > 0
    assert side["tpot_inflation"] == pytest.approx(
        side["tpot_ms"]["fills"] / side["tpot_ms"]["no_fills"] - 1, abs=1e-3)
    assert 0 <= side["fill_kv_share"] <= side["kv_share"] <= 1
    assert set(side["adoption"]) == {"remaining_s", "adoptions", "adoptions_served"}


def test_the_interference_term_gives_the_sim_the_real_engines_tpot_inflation(
        predicted: dict[str, Any]) -> None:
    plan = wf.ComparisonPlan(2, seeds=1, preset="test-tiny-fit")
    base = wf._engine_side(predicted)["tpot_inflation"]
    target = base + 0.3
    found = asyncio.run(wf._interference_term("routing", plan, target, base))
    assert found is not None and found["options"]["per_seq_overhead_s"] > 0
    assert found["options"]["tpot_inflation"] == pytest.approx(target, abs=0.1)
    ratio = predicted["arms"]["full"]["ratio_to_floor"]
    assert found["full_over_floor"] > ratio  # costlier co-residence: fills save less
    assert asyncio.run(wf._interference_term("routing", plan, base - 0.1, base)) is None


def test_the_prompt_term_prices_prompts_as_long_as_the_real_tokenizer_makes_them(
        predicted: dict[str, Any]) -> None:
    plan = wf.ComparisonPlan(2, seeds=1, preset="test-tiny-fit")
    sim = wf._engine_side(predicted)["prompt_tokens_per_call"]
    found = asyncio.run(wf._prompt_term("routing", plan, 2 * sim, sim))
    assert found is not None and found["options"]["prompt_token_ratio"] == 2.0
    assert found["full_over_floor"] != predicted["arms"]["full"]["ratio_to_floor"]
    assert asyncio.run(wf._prompt_term("routing", plan, None, sim)) is None


def test_the_hop_cost_that_matches_the_real_overhead_scales_the_default() -> None:
    real = {"outside_ms_per_call": {"no_fills": 12.0}}
    sim = {"outside_ms_per_call": {"no_fills": 1.0}}
    assert wf._hop_matching(real, sim) == pytest.approx(wf.DEFAULT_HOP_S * 1000 * 12)
    assert wf._hop_matching({"outside_ms_per_call": {"no_fills": None}}, sim) is None


def test_the_responsible_term_is_the_one_moving_the_prediction_most_toward_the_measurement(
) -> None:
    terms = {"output lengths": {"moves_prediction_by": -0.02},
             "mesh overhead": {"moves_prediction_by": -0.08}}
    assert wf._responsible(terms, difference=-0.1) is None  # both move it further away
    assert wf._responsible(terms, difference=+0.1) == "mesh overhead"
    assert wf._responsible({}, difference=0.2) is None


def _fidelity_result() -> dict[str, Any]:
    figures = {"full_over_floor": 0.5, "ci95": [0.4, 0.6], "oracle_share": 0.8}
    return {"engine": "vllm 0.32.0 on tiny", "workflows_per_seed": 12, "seeds": [0, 1],
            "arrival": "serial", "preset": wf.FITTED,
            "workflows": {"routing": {"measured": figures,
                                      "predicted": {**figures, "full_over_floor": 0.56},
                                      "difference": 0.06, "outputs_equal_floor": True,
                                      "responsible": "mesh overhead"}}}


def test_the_report_section_shows_the_latest_results_with_date_and_commit(
        tmp_path: Path) -> None:
    assert latest("workflow-fidelity", tmp_path) is None
    text = "\n".join(section(tmp_path))
    assert "## On a real engine" in text and "No workflow-level fidelity results yet" in text
    path = record("workflow-fidelity", _fidelity_result(), tmp_path)
    kept = json.loads(path.read_text())
    assert kept["date"] and kept["commit"]
    record("gpu-check", {"mode": "gpu", "device": "NVIDIA H200", "ok": True, "steps": [
        {"name": "lads", "ok": True, "wall_s": 9.5, "headline": "3 leases granted"}]}, tmp_path)
    text = "\n".join(section(tmp_path))
    assert "| routing | 0.500 [0.400, 0.600] | 0.560 | +0.060 |" in text
    assert kept["date"] in text and kept["commit"] in text
    assert "GPU check (gpu, NVIDIA H200)" in text and "| lads | yes | 9.5 |" in text


def test_an_unknown_results_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown results"):
        record("elsewhere", {}, tmp_path)
