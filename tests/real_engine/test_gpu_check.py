"""``scripts/gpu_check.sh OUTDIR --cpu-smoke``: every step of the GPU check at toy sizes on the
CPU vLLM, so that the GPU path cannot rot unseen (the GPU run itself needs a lent GPU)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.real_engine.engines import require_plugin, require_vllm

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
STEPS = ["environment", "models", "timing toy-8b", "matrix", "equivalence", "timing toy-32b",
         "lads"]


def test_the_cpu_smoke_runs_every_step_of_the_gpu_check_and_writes_its_summary(
        tmp_path: Path) -> None:
    require_vllm()
    require_plugin()
    out, results = tmp_path / "out", tmp_path / "results"
    env = {**os.environ, "DYNBRANCH_RESULTS_DIR": str(results)}
    done = subprocess.run(["bash", str(ROOT / "scripts/gpu_check.sh"), str(out), "--cpu-smoke"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    summary = (out / "summary.md").read_text() if (out / "summary.md").exists() else ""
    print(summary or done.stdout[-4000:] + done.stderr[-4000:])
    record = json.loads((out / "gpu-check.json").read_text())
    assert [s["name"] for s in record["steps"]] == STEPS
    assert record["ok"] and done.returncode == 0, summary
    assert (out / "presets" / "toy-8b-cpu-measured.yaml").is_file()
    assert (out / "models" / "toy-32b" / "config.json").is_file()
    matrix = next(s for s in record["steps"] if s["name"] == "matrix")["result"]
    assert set(matrix) == {"routing", "subagent"}
    assert all(m["measured"]["full_over_floor"] > 0 and m["predicted"]["full_over_floor"] > 0
               for m in matrix.values())
    assert not results.exists()  # only a GPU run is what the report shows


def test_the_script_refuses_bad_usage() -> None:
    done = subprocess.run(["bash", str(ROOT / "scripts/gpu_check.sh"), "/tmp/x", "--gpu"],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "usage" in done.stderr
