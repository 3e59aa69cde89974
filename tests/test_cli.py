"""The dynbranch command: --help everywhere, `up` + `call` + SIGTERM, and the demo."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

DYNBRANCH = [sys.executable, "-m", "services.cli"]


@pytest.mark.parametrize("args", [[], ["up"], ["call"], ["demo"], ["bench"], ["report"], ["serve"]])
def test_every_command_has_help(args: list[str]) -> None:
    out = subprocess.run([*DYNBRANCH, *args, "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and "usage: dynbranch" in out.stdout


@pytest.mark.parametrize("service", ["engine", "gateway", "csl", "admission", "delivery",
                                     "corpus"])
def test_every_service_has_help(service: str) -> None:
    out = subprocess.run([*DYNBRANCH, "serve", service, "--help"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0 and "--config" in out.stdout


def test_up_configures_one_corpus_for_every_gateway() -> None:
    from services.cli import _spec, build_parser

    parse = build_parser().parse_args
    spec = _spec(parse(["up", "--gateways", "3", "--corpus-source", "hotpotqa"]))
    assert (spec.gateways, spec.corpus, spec.corpus_source, spec.corpus_path) == (
        3, True, "hotpotqa", "")
    spec = _spec(parse(["up", "--corpus", "/data/corpus", "--corpus-source", "none"]))
    assert spec.corpus and spec.corpus_path == "/data/corpus" and not spec.corpus_source
    assert _spec(parse(["up", "--gateways", "2"])).corpus_source == "hotpotqa"  # the default
    assert not _spec(parse(["up", "--corpus-source", "none"])).corpus
    assert not _spec(parse(["demo"])).corpus  # the demo routes only
    with pytest.raises(SystemExit, match="--corpus-source: no data set 'wiki'"):
        _spec(parse(["up", "--corpus-source", "wiki"]))
    out = subprocess.run([*DYNBRANCH, "up", "--help"], capture_output=True, text=True,
                         timeout=30).stdout
    assert "--corpus DIR" in out and "--corpus-source NAME" in out


def test_up_without_the_default_data_set_starts_an_empty_corpus_but_a_named_one_refuses(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from services.cli import _corpus_line, _spec, build_parser
    from services.corpus import LOADERS, DataUnavailable

    def absent(_data_dir: object) -> object:
        raise DataUnavailable("data set file /nowhere/x.jsonl does not exist")

    monkeypatch.setitem(LOADERS, "hotpotqa", absent)
    spec = _spec(build_parser().parse_args(["up"]))
    assert spec.corpus and spec.corpus_empty and not spec.corpus_source
    assert _corpus_line(spec).startswith("retrieval corpus: EMPTY, filled only by writes")
    with pytest.raises(SystemExit, match="--corpus-source hotpotqa: data set file /nowhere"):
        _spec(build_parser().parse_args(["up", "--corpus-source", "hotpotqa"]))


def test_up_passes_settings_and_gateway_ports_through(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.cli import _spec, build_parser

    def spec(*argv: str) -> object:
        return _spec(build_parser().parse_args(["up", "--corpus-source", "none", *argv]))

    got = spec("--set", "gateway.top_k=3", "--set", "csl.max_entries=9", "--set",
               "engine.max_running=3", "--engine-set", "x=1")
    assert got.gateway_settings == ["top_k=3"] and got.engine_settings == [
        "x=1", "max_running=3"] and got.service_settings == {"csl": ["max_entries=9"]}
    for bad in ("gateway", "gateway.k", "wiki.k=v"):
        with pytest.raises(SystemExit, match="expected SERVICE.KEY=VALUE"):
            spec("--set", bad)
    assert (spec().gateway_grpc_port, spec().gateway_http_port) == (None, None)
    monkeypatch.setenv("DYNBRANCH_GATEWAY_HTTP_PORT", "8100")  # the flag wins over it
    got = spec("--gateways", "2", "--grpc-port", "9000")
    assert (got.gateway_grpc_port, got.gateway_http_port) == (9000, 8100)
    assert spec("--http-port", "8200").gateway_http_port == 8200
    with pytest.raises(SystemExit, match="--grpc-port: 70000 is not a port"):
        spec("--grpc-port", "70000")
    monkeypatch.setenv("DYNBRANCH_GATEWAY_HTTP_PORT", "eighty")
    with pytest.raises(SystemExit, match="DYNBRANCH_GATEWAY_HTTP_PORT: 'eighty' is not a port"):
        spec()


def _read_until(proc: subprocess.Popen[str], pattern: str, timeout_s: float) -> list[str]:
    lines: list[str] = []
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if re.search(pattern, line):
            return lines
    raise AssertionError(f"no {pattern!r} in {lines}")


@contextlib.contextmanager
def up_lines(args: list[str], run_dir: Path, timeout_s: float = 120, stop_s: float = 30,
             group: bool = False) -> Iterator[list[str]]:
    """``dynbranch up ARGS`` with its temporary files under ``run_dir``: what it prints up to
    its ``try:`` line. SIGTERM at the end, SIGKILL (its whole process group with ``group``, which
    starts it in a session of its own) after ``stop_s``."""
    proc = subprocess.Popen([*DYNBRANCH, "up", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=group,
                            env={**os.environ, "TMPDIR": str(run_dir)})
    try:
        yield _read_until(proc, r"^try: ", timeout_s)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=stop_s)
            except subprocess.TimeoutExpired:
                _kill_children(proc.pid)  # each runs in a session of its own
                if group:
                    os.killpg(proc.pid, signal.SIGKILL)
                else:
                    proc.kill()


def _kill_children(pid: int) -> None:
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    for child in children.stdout.split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(child), signal.SIGKILL)


def printed(lines: list[str], pattern: str) -> str:
    """The first group of ``pattern`` in what ``dynbranch up`` printed."""
    return next(m.group(1) for line in lines if (m := re.search(pattern, line)))


@contextlib.contextmanager
def up_url(args: list[str], run_dir: Path, pattern: str, timeout_s: float = 120,
           stop_s: float = 30, group: bool = False) -> Iterator[str]:
    """``dynbranch up ARGS`` (``up_lines``): the first group of ``pattern`` in what it prints."""
    with up_lines(args, run_dir, timeout_s, stop_s, group) as lines:
        yield printed(lines, pattern)


@pytest.mark.slow
def test_up_serves_calls_and_stops_every_process_on_sigterm(tmp_path) -> None:  # noqa: ANN001
    proc = subprocess.Popen([*DYNBRANCH, "up", "--engines", "2", "--time-scale", "0.01",
                             "--log-level", "WARNING"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(tmp_path)})  # its kept run folder
    try:
        lines = _read_until(proc, r"^try: ", 90)
        names = [line.split()[0] for line in lines if "grpc 127.0.0.1:" in line]
        assert sorted(names) == ["admission", "corpus", "csl", "delivery", "engine-0", "engine-1",
                                 "gateway"]
        gateway = re.search(r"--gateway (\S+)", lines[-1]).group(1)
        call = subprocess.run([*DYNBRANCH, "call", "--gateway", gateway, "--model", "qwen3-32b",
                               "--prompt", "hello mesh", "--max-tokens", "8"],
                              capture_output=True, text=True, timeout=60)
        assert call.returncode == 0, call.stderr
        assert "source RESULT_SOURCE_ENGINE" in call.stdout and "engine s queue" in call.stdout
        bad = subprocess.run([*DYNBRANCH, "call", "--gateway", gateway, "--model", "nope",
                              "--prompt", "x"], capture_output=True, text=True, timeout=60)
        assert bad.returncode == 1 and "INVALID_ARGUMENT: demand.model" in bad.stderr
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True)
        pids = children.stdout.split()
        assert len(pids) == 7
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert "dynbranch mesh stopped" in proc.stdout.read()
        time.sleep(0.2)
        alive = [p for p in pids if subprocess.run(["kill", "-0", p]).returncode == 0]
        assert alive == []
    finally:
        proc.kill()


@pytest.mark.slow
def test_demo_runs_the_batch_and_prints_a_summary() -> None:
    out = subprocess.run([*DYNBRANCH, "demo", "--requests", "8", "--concurrency", "4",
                          "--log-level", "WARNING"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "8 routing workflows, 8 ok, 0 failed" in out.stdout
    assert "SIMULATED engine" in out.stdout
    assert "promoted fill (C2)" in out.stdout and "library (C1)" in out.stdout
