"""Results measured on a real engine, kept for the report: ``bench workflow-fidelity`` (CPU) and
``scripts/gpu_check.sh`` each write their latest run to a results file with its date and commit;
``dynbranch report`` reads them into the summary's "On a real engine" section and never runs a
real engine itself.

Files: ``$DYNBRANCH_RESULTS_DIR`` (default ``.dynbranch/results``) / ``workflow-fidelity.json``
and ``gpu-check.json``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loadgen.report.provenance import commit, utc_now

#: Results name → what measured it (the report's wording).
RESULTS = {"workflow-fidelity": "dynbranch bench workflow-fidelity (vLLM on this CPU machine)",
           "gpu-check": "scripts/gpu_check.sh"}


def results_dir() -> Path:
    """``$DYNBRANCH_RESULTS_DIR`` or ``.dynbranch/results``."""
    return Path(os.environ.get("DYNBRANCH_RESULTS_DIR", ".dynbranch/results"))


def record(name: str, result: Mapping[str, Any], folder: Path | None = None) -> Path:
    """Write ``result`` as the latest ``name`` results, stamped with date and commit."""
    if name not in RESULTS:
        raise ValueError(f"unknown results {name!r}; known: {', '.join(RESULTS)}")
    path = (folder or results_dir()) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    stamped = {"date": utc_now(), "commit": commit(), **result}
    path.write_text(json.dumps(stamped, sort_keys=True, indent=1))
    return path


def latest(name: str, folder: Path | None = None) -> dict[str, Any] | None:
    """The latest ``name`` results, or None when none were written."""
    path = (folder or results_dir()) / f"{name}.json"
    if not path.is_file():
        return None
    found: dict[str, Any] = json.loads(path.read_text())
    return found


def _ci(ci: Any) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-"


def _or_dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _fidelity_lines(r: Mapping[str, Any]) -> list[str]:
    lines = [f"Workflow-level fidelity, {r['engine']}: {r['date']} at commit `{r['commit']}`; "
             f"{r['workflows_per_seed']} workflows x seeds {r['seeds']}, {r['arrival']}; the "
             f"sim fitted in the same run (`{r['preset']}`), on the virtual clock.", "",
             "| workload | measured full/floor [95% CI] | predicted | difference | oracle share "
             "measured / predicted | outputs = floor | largest term |",
             "|---|---|---|---|---|---|---|"]
    for name, w in r.get("workflows", {}).items():
        m, p = w["measured"], w["predicted"]
        lines.append(f"| {name} | {m['full_over_floor']:.3f} {_ci(m['ci95'])} | "
                     f"{p['full_over_floor']:.3f} | {w['difference']:+.3f} | "
                     f"{_or_dash(m['oracle_share'])} / {_or_dash(p['oracle_share'])} | "
                     f"{'yes' if w['outputs_equal_floor'] else 'NO'} | "
                     f"{w.get('responsible') or '-'} |")
    return lines


def _gpu_lines(r: Mapping[str, Any]) -> list[str]:
    lines = [f"GPU check ({r['mode']}, {r['device']}): {r['date']} at commit `{r['commit']}`; "
             f"{'all steps passed' if r['ok'] else 'FAILED'}.", "",
             "| step | ok | seconds | result |", "|---|---|---|---|"]
    for step in r.get("steps", []):
        lines.append(f"| {step['name']} | {'yes' if step['ok'] else 'NO'} | "
                     f"{step['wall_s']} | {step.get('headline', '')} |")
    return lines


def section(folder: Path | None = None) -> list[str]:
    """The summary's "On a real engine" section from the latest results (a line saying none
    were written where a file is absent)."""
    lines = ["## On a real engine", ""]
    fidelity, gpu = latest("workflow-fidelity", folder), latest("gpu-check", folder)
    lines += _fidelity_lines(fidelity) if fidelity else [
        "No workflow-level fidelity results yet: run `dynbranch bench workflow-fidelity`."]
    lines.append("")
    lines += _gpu_lines(gpu) if gpu else [
        "No GPU check results yet: `scripts/gpu_check.sh OUTDIR` when a GPU is lent "
        "(docs/gpu-check.md)."]
    return [*lines, ""]


__all__ = ["RESULTS", "latest", "record", "results_dir", "section"]
