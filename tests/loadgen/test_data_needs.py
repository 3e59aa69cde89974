"""Data checked before a run: `report` and `bench` without their data sets end at once with one
line naming what is absent; --data-dir points the one resolver elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.data_needs import bench_files, prepare, report_files, workload_files
from loadgen.workloads import WORKLOADS, get_workload
from loadgen.workloads.lads import cohort_workload, web_burst_workload
from services import cli
from services.corpus.loaders import DATA_DIR_ENV, default_data_dir

DATA = default_data_dir()
needs_data = pytest.mark.skipif(not DATA.exists(), reason=f"shared data sets absent at {DATA}")


@pytest.fixture(autouse=True)
def _restore_data_dir_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """--data-dir exports the variable; the test's value is undone afterwards."""
    monkeypatch.setenv(DATA_DIR_ENV, str(DATA))


def dynbranch(argv: list[str]) -> int:
    """``dynbranch ARGV`` in this process (``cli.main`` less its uvloop policy, which would
    outlive the test)."""
    args = cli.build_parser().parse_args(argv)
    return int(args.run(args))


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_report_without_data_exits_with_one_line_and_writes_no_summary(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report"
    code = dynbranch(["report", "--data-dir", str(tmp_path / "absent"), "--out", str(out)])
    line = _error_line(capsys)
    assert code == 2 and not out.exists()
    assert f"folder {tmp_path / 'absent'} does not exist" in line
    assert "--data-dir DIR" in line and DATA_DIR_ENV in line


def test_bench_names_each_absent_file_of_its_workload(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = dynbranch(["bench", "arms", "--quick", "--workload", "hci", "--data-dir", str(tmp_path)])
    line = _error_line(capsys)
    assert code == 2 and f"sgd/test_dialogues_subset.jsonl not in {tmp_path}" in line


def test_the_environment_variable_is_the_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    assert default_data_dir() == tmp_path
    assert dynbranch(["bench", "lads", "--quick"]) == 2
    assert f"not in {tmp_path}" in _error_line(capsys)


def test_benches_without_data_sets_need_none() -> None:
    assert bench_files("csl") == bench_files("faults") == ()
    assert set(workload_files(WORKLOADS)) <= set(report_files(full=True))


def _only(files: tuple[str, ...], folder: Path) -> Path:
    """A data folder holding ``files`` alone (links into the shared data sets)."""
    for relative in files:
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).symlink_to(DATA / relative)
    return folder


@needs_data
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_a_workloads_declared_files_hold_its_instances(name: str, tmp_path: Path) -> None:
    folder = _only(WORKLOADS[name].data_files, tmp_path)
    assert get_workload(name, folder).pool()


@needs_data
def test_the_lads_files_are_all_bench_lads_reads(tmp_path: Path) -> None:
    folder = _only(bench_files("lads"), tmp_path)
    assert cohort_workload(0, data_root=folder).workflows
    assert web_burst_workload(0, data_root=folder).workflows


@needs_data
def test_data_dir_flag_runs_a_quick_bench_on_that_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "absent"))
    folder = _only(WORKLOADS["hci"].data_files, tmp_path / "data")
    code = dynbranch(["bench", "arms", "--quick", "--workload", "hci", "--workflows", "2",
                     "--arms", "floor", "--data-dir", str(folder)])
    assert code == 0 and default_data_dir() == folder.resolve()
    assert "floor" in capsys.readouterr().out
    prepare(report_files(full=True), str(DATA))  # the real folder holds everything report reads
