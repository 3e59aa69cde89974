"""What the GPU check plans without running an engine: the model shapes it writes are the real
models' shapes, and without a GPU its GPU mode stops at its first step (the steps themselves run
in tests/real_engine/test_gpu_check.py, at toy sizes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.gpu_check import FIXED_STEPS, MODES, main
from services.engine_agent.backends.tiny_model import TinyModelConfig
from services.engine_agent.calibrate import qwen3_model_spec

#: Non-embedding parameters of the published models (Qwen3 technical report, Table 1 sizes).
PUBLISHED_NON_EMBEDDING = {"qwen3-8b": 6.95e9, "qwen3-32b": 31.2e9}


@pytest.mark.parametrize("shape", MODES["gpu"].shapes, ids=lambda s: s.name)
def test_the_gpu_shapes_have_the_published_models_size(shape) -> None:
    tiny = {"vocab_size": TinyModelConfig().vocab_size}
    spec = qwen3_model_spec(shape.name, shape.config(tiny), 4096)
    assert spec.non_embedding_params == pytest.approx(PUBLISHED_NON_EMBEDDING[shape.name],
                                                      rel=0.02)
    assert shape.config(tiny)["layer_types"] == ["full_attention"] * shape.layers


def test_every_mode_has_the_same_steps() -> None:
    assert {len(m.shapes) for m in MODES.values()} == {2}
    assert FIXED_STEPS[0] == "environment"


def test_without_a_gpu_the_gpu_mode_stops_after_its_first_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    monkeypatch.setenv("DYNBRANCH_RESULTS_DIR", str(tmp_path / "results"))
    assert main([str(tmp_path / "out"), "--mode", "gpu"]) == 1
    record = json.loads((tmp_path / "out" / "gpu-check.json").read_text())
    assert [s["name"] for s in record["steps"]] == ["environment"]
    assert not record["ok"] and "needs CUDA" in record["steps"][0]["headline"]
    assert "SOME STEPS FAILED" in (tmp_path / "out" / "summary.md").read_text()
    assert not (tmp_path / "results").exists()  # no GPU ran: the report keeps its last one
