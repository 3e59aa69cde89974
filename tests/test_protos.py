"""The committed stubs are exactly what the protos generate; every message and field is
commented."""

from __future__ import annotations

import re
from pathlib import Path

from services.common.runtime import protogen


def test_committed_stubs_match_protos(tmp_path: Path) -> None:
    generated = {p.name: p.read_text() for p in protogen.generate(tmp_path)}
    committed = {p.name: p.read_text() for p in protogen.OUT_DIR.iterdir() if p.is_file()}
    regen = "run python -m services.common.runtime.protogen"
    assert sorted(generated) == sorted(committed), f"stub files differ: {regen}"
    drift = [name for name in generated if generated[name] != committed[name]]
    assert not drift, f"stale stubs {drift}: run python -m services.common.runtime.protogen"


def _uncommented(text: str) -> list[str]:
    lines = text.splitlines()
    bad = []
    decl = re.compile(r"^\s*(message|enum|service|rpc|oneof)\s"
                      r"|^\s*(repeated |optional )?[\w.]+ \w+ = \d+;"
                      r"|^\s*[A-Z0-9_]+ = \d+;")
    for i, line in enumerate(lines):
        if decl.search(line) and not (i and lines[i - 1].strip().startswith("//")):
            bad.append(line.strip())
    return bad


def test_every_message_field_and_rpc_has_a_comment() -> None:
    for proto in sorted(protogen.PROTO_DIR.glob("*.proto")):
        assert _uncommented(proto.read_text()) == [], proto.name


def test_cross_service_records_carry_a_header() -> None:
    from services.common.pb import admission_pb2, common_pb2, csl_pb2
    records = [common_pb2.StageDemand, common_pb2.LoadView, common_pb2.ShadowRecord,
               common_pb2.LeaseRecord, csl_pb2.PutRequest, csl_pb2.WriteRecordsRequest,
               admission_pb2.OpenBranchRequest, admission_pb2.AdmitFillsRequest,
               admission_pb2.ReportOutcomeRequest, common_pb2.BudgetRecord,
               common_pb2.InventoryView]
    for record in records:
        field = record.DESCRIPTOR.fields_by_name.get("header")
        assert field is not None and field.message_type.name == "RecordHeader", record.__name__
