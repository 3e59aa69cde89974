"""The commit and date a report records."""

from __future__ import annotations

import subprocess
from datetime import datetime
from pathlib import Path

from loadgen.report import provenance
from loadgen.report.provenance import commit, utc_now


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_commit_is_head_and_says_when_the_tree_differs(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git(tmp_path, "add", "a.py")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a")
    head = git(tmp_path, "rev-parse", "HEAD")
    assert commit(tmp_path) == head
    (tmp_path / "notes.md").write_text("untracked\n")
    assert commit(tmp_path) == head  # an untracked file changes no code that ran
    (tmp_path / "a.py").write_text("x = 2\n")
    assert commit(tmp_path) == f"{head}-dirty"


def test_outside_a_checkout_the_commit_is_unknown(tmp_path: Path) -> None:
    assert commit(tmp_path) == "unknown"
    git(tmp_path, "init", "-q")
    (tmp_path / "pkg").mkdir()
    assert commit(tmp_path / "pkg") == "unknown"  # a checkout above it is not what ran


def test_the_date_is_utc_iso() -> None:
    date = datetime.fromisoformat(utc_now())
    assert date.utcoffset() is not None and date.utcoffset().total_seconds() == 0


def test_the_checkout_is_the_repository_the_package_runs_from() -> None:
    # a report run from this checkout names its commit (a ROOT one folder off says "unknown")
    assert (provenance.ROOT / "pyproject.toml").is_file()
    assert (provenance.ROOT / "loadgen" / "report" / "provenance.py").is_file()
