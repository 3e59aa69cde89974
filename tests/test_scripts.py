"""scripts/test.sh and scripts/demo.sh: -h and --help print their usage and pytest's or the
report's help, and install nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _test_sh(*args: str, venv: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(ROOT / "scripts" / "test.sh"), *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "DYNBRANCH_VENV": str(venv)})


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_without_a_venv_prints_the_usage_and_creates_none(flag: str, tmp_path: Path) -> None:
    run = _test_sh("-k", "x", flag, venv=tmp_path / "venv")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage: bash scripts/test.sh")
    assert "pytest's own options" in run.stdout
    assert not (tmp_path / "venv").exists()  # setup.sh would have created it


def test_help_with_a_venv_adds_pytests_help() -> None:
    run = _test_sh("--help", venv=Path(sys.executable).parents[1])
    assert run.returncode == 0, run.stderr
    assert "DYNBRANCH_SKIP_REAL_ENGINE=1" in run.stdout and "usage: python -m pytest" in run.stdout


def test_demo_help_prints_the_usage_and_the_reports_options_and_installs_nothing(
        tmp_path: Path) -> None:
    bare = subprocess.run(["bash", str(ROOT / "scripts" / "demo.sh"), "--full", "-h"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "DYNBRANCH_VENV": str(tmp_path / "venv")})
    assert bare.returncode == 0, bare.stderr
    assert bare.stdout.startswith("usage: bash scripts/demo.sh")
    assert not (tmp_path / "venv").exists()  # setup.sh would have created it
    venv = str(Path(sys.executable).parents[1])
    full = subprocess.run(["bash", str(ROOT / "scripts" / "demo.sh"), "--help"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "DYNBRANCH_VENV": venv})
    assert full.returncode == 0, full.stderr
    assert "usage: dynbranch report" in full.stdout and "--data-dir" in full.stdout
