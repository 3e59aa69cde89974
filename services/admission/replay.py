"""Oracle replay of recorded admission decisions (dynbranch Appendix B).

The priced controller keeps its Action 1 decisions (``max_snapshots``); with ``snapshot_path``
set, the admission service writes them there as JSON lines when it stops. This command scores a
file against the exact ordered-subset oracle::

    python -m services.admission.replay decisions.jsonl

and prints ``{"snapshots", "positive", "set_match", "utility_share"}`` as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from services.admission.core import Snapshot
from services.admission.fill_gate import FillCandidate, oracle
from services.admission.load_view import LoadSnapshot
from services.admission.pricing import Footprint, LoadPricing, PriceCurves
from services.common.values.errors import InvalidArgument


def replay(snapshots: Sequence[Snapshot]) -> dict[str, float]:
    """Appendix B: score recorded decisions against the exact ordered-subset oracle.

    Over the snapshots whose oracle optimum is positive: the share where the implemented rule
    admitted an oracle-optimal set (``set_match``), and the share of the summed oracle utility the
    rule's admissions retain (``utility_share``).
    """
    positive = matched = 0
    kept = best = 0.0
    for snap in snapshots:
        result = oracle(snap.candidates, snap.view, snap.pricing)
        if result.utility_ms <= 1e-9:
            continue
        positive += 1
        matched += (frozenset(snap.admitted) == result.names
                    or abs(snap.utility_ms - result.utility_ms)
                    <= 1e-6 * max(1.0, result.utility_ms))
        kept += snap.utility_ms
        best += result.utility_ms
    return {"snapshots": float(len(snapshots)), "positive": float(positive),
            "set_match": matched / positive if positive else math.nan,
            "utility_share": kept / best if best else math.nan}


def encode(snapshot: Snapshot) -> str:
    """One decision as a JSON line."""
    return json.dumps({
        "candidates": [{"name": c.name, "p": c.p, "gain_ms": c.gain_ms,
                        "footprint": asdict(c.footprint)} for c in snapshot.candidates
                       if isinstance(c.footprint, Footprint)],
        "view": asdict(snapshot.view), "curves": asdict(snapshot.pricing.curves),
        "admitted": list(snapshot.admitted), "utility_ms": snapshot.utility_ms,
    }, sort_keys=True)


def decode(line: str) -> Snapshot:
    """Inverse of ``encode``; a clear error naming what is missing."""
    try:
        raw: dict[str, Any] = json.loads(line)
        candidates = tuple(FillCandidate(c["name"], c["p"], c["gain_ms"],
                                         Footprint(**c["footprint"]))
                           for c in raw["candidates"])
        pricing = LoadPricing(PriceCurves(**raw["curves"]))
        return Snapshot(candidates, LoadSnapshot(**raw["view"]), pricing,
                        tuple(raw["admitted"]), float(raw["utility_ms"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidArgument("snapshot", f"not a recorded admission decision: {exc}") from None


def write(path: str | Path, snapshots: Iterable[Snapshot]) -> int:
    """Append decisions to a JSON-lines file; returns how many."""
    count = 0
    with Path(path).open("a", encoding="utf-8") as out:
        for snapshot in snapshots:
            out.write(encode(snapshot) + "\n")
            count += 1
    return count


def read(path: str | Path) -> Iterator[Snapshot]:
    """The decisions of a JSON-lines file."""
    with Path(path).open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield decode(line)


def main(argv: list[str] | None = None) -> int:
    """Score a recorded file against the oracle; one JSON line on stdout."""
    parser = argparse.ArgumentParser(prog="python -m services.admission.replay",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("path", help="JSON-lines file the admission service recorded")
    args = parser.parse_args(argv)
    if not Path(args.path).exists():
        print(f"replay: {args.path} does not exist", file=sys.stderr)
        return 2
    print(json.dumps(replay(list(read(args.path))), sort_keys=True))
    return 0


__all__ = ["decode", "encode", "main", "read", "replay", "write"]


if __name__ == "__main__":
    sys.exit(main())
