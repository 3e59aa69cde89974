"""mypy, strict, over the protocol-free rooms (``[tool.mypy]`` in pyproject.toml: every service's
core, the shared values, the engine agent's sim/ and leases/), as part of the test command."""

from __future__ import annotations

import os
from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parents[1]


def test_the_cores_and_values_type_check_strictly() -> None:
    cwd = Path.cwd()
    os.chdir(ROOT)  # mypy reads its scope and exclusions from pyproject.toml here
    try:
        out, err, status = api.run([])
    finally:
        os.chdir(cwd)
    assert status == 0, out + err
    assert "Success: no issues found" in out
    checked = int(out.split(" in ")[-1].split()[0])
    assert checked > 90, out  # the scope did not silently shrink
