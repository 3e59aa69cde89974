"""reuse_name: deterministic across processes, sensitive to every result-determining field."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.pb import common_pb2
from services.common.values.errors import InvalidArgument
from services.common.values.reuse_name import (
    MAX_TENANT_BYTES,
    ReuseName,
    StageFingerprint,
    reuse_name,
)

BASE = StageFingerprint("routing", "router", 3, "qwen3-32b", temperature=0.0, top_p=1.0,
                        top_k=0, seed=None, max_tokens=256, stop=("\n\n",), ignore_eos=False)

texts = st.text(max_size=12)
# A tenant keys a store, so it is at most MAX_TENANT_BYTES of UTF-8 (a longer one is refused).
tenants = st.text(min_size=1).filter(lambda t: len(t.encode()) <= MAX_TENANT_BYTES)
fingerprints = st.builds(
    StageFingerprint, template_id=texts, stage_id=texts,
    stage_version=st.integers(0, 2**32), model=texts,
    temperature=st.floats(0, 2, allow_nan=False), top_p=st.floats(0, 1, allow_nan=False),
    top_k=st.integers(-1, 1000), seed=st.none() | st.integers(0, 2**64 - 1),
    max_tokens=st.integers(0, 2**20), stop=st.lists(texts, max_size=3).map(tuple),
    ignore_eos=st.booleans(),
)


def _changed(fp: StageFingerprint, field: str, data: st.DataObject) -> StageFingerprint:
    strategy = {
        "template_id": texts, "stage_id": texts, "model": texts,
        "stage_version": st.integers(0, 2**32), "temperature": st.floats(0, 2, allow_nan=False),
        "top_p": st.floats(0, 1, allow_nan=False), "top_k": st.integers(-1, 1000),
        "seed": st.none() | st.integers(0, 2**64 - 1), "max_tokens": st.integers(0, 2**20),
        "stop": st.lists(texts, max_size=3).map(tuple), "ignore_eos": st.booleans(),
    }[field]
    old = getattr(fp, field)
    new = data.draw(strategy.filter(lambda v: v != old and not (v == 0.0 and old == 0.0)))
    return dataclasses.replace(fp, **{field: new})


FIELDS = [f.name for f in dataclasses.fields(StageFingerprint)]


@settings(max_examples=60, deadline=None)
@given(fp=fingerprints, data=st.data(), field=st.sampled_from(FIELDS), prompt=st.binary())
def test_changing_any_fingerprint_field_changes_the_name(fp, data, field, prompt) -> None:  # type: ignore[no-untyped-def]
    assert reuse_name("t", fp, prompt) != reuse_name("t", _changed(fp, field, data), prompt)


@settings(max_examples=60, deadline=None)
@given(fp=fingerprints, a=st.binary(), b=st.binary())
def test_changing_the_rendered_input_changes_the_name(fp, a, b) -> None:  # type: ignore[no-untyped-def]
    assert (reuse_name("t", fp, a) == reuse_name("t", fp, b)) == (a == b)


@settings(max_examples=40, deadline=None)
@given(fp=fingerprints, prompt=st.binary(), t1=tenants, t2=tenants)
def test_tenants_get_different_names_unless_shared(fp, prompt, t1, t2) -> None:  # type: ignore[no-untyped-def]
    assert (reuse_name(t1, fp, prompt) == reuse_name(t2, fp, prompt)) == (t1 == t2)
    assert reuse_name(t1, fp, prompt, shared=True) == reuse_name(t2, fp, prompt, shared=True)


def test_a_tenant_longer_than_a_store_key_allows_is_refused_by_name() -> None:
    longest = "\u00e9" * (MAX_TENANT_BYTES // 2)  # two bytes each: exactly the limit
    assert reuse_name(longest, BASE, b"q").tenant == longest
    with pytest.raises(InvalidArgument, match=f"name.tenant: longer than {MAX_TENANT_BYTES} bytes"):
        reuse_name(longest + "a", BASE, b"q")


def test_same_inputs_give_the_same_name() -> None:
    assert reuse_name("acme", BASE, b"hello") == reuse_name("acme", BASE, b"hello")


def test_name_is_the_same_in_another_process() -> None:
    code = ("from services.common.values.reuse_name import StageFingerprint, reuse_name;"
            "fp = StageFingerprint('routing', 'router', 3, 'qwen3-32b', max_tokens=256,"
            " stop=('\\n\\n',));"
            "print(reuse_name('acme', fp, b'hello').digest)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONHASHSEED": "12345"},
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == reuse_name("acme", BASE, b"hello").digest


def test_encoding_is_unambiguous_across_field_boundaries() -> None:
    a = dataclasses.replace(BASE, template_id="ab", stage_id="c")
    b = dataclasses.replace(BASE, template_id="a", stage_id="bc")
    assert reuse_name("t", a, b"") != reuse_name("t", b, b"")
    assert reuse_name("t", dataclasses.replace(BASE, stop=("ab",)), b"") != \
        reuse_name("t", dataclasses.replace(BASE, stop=("a", "b")), b"")
    assert reuse_name("t", dataclasses.replace(BASE, seed=None), b"") != \
        reuse_name("t", dataclasses.replace(BASE, seed=0), b"")


def test_negative_zero_temperature_names_like_zero() -> None:
    assert reuse_name("t", dataclasses.replace(BASE, temperature=-0.0), b"x") == \
        reuse_name("t", BASE, b"x")


def test_shared_names_live_in_the_shared_namespace() -> None:
    assert reuse_name("acme", BASE, b"x", shared=True).tenant == ""
    assert reuse_name("acme", BASE, b"x", shared=True) != reuse_name("acme", BASE, b"x")


def test_digest_is_64_lower_case_hex() -> None:
    digest = reuse_name("acme", BASE, b"x").digest
    assert len(digest) == 64 and digest == digest.lower()
    int(digest, 16)


def test_unshared_name_requires_a_tenant() -> None:
    with pytest.raises(InvalidArgument, match="tenant"):
        reuse_name("", BASE, b"x")


def test_malformed_names_are_rejected() -> None:
    with pytest.raises(InvalidArgument, match="digest"):
        ReuseName("acme", "XYZ")
    with pytest.raises(InvalidArgument, match="tenant"):
        ReuseName("a" * 300, "0" * 64)


def test_fingerprint_from_a_demand_matches_the_wire_values() -> None:
    demand = common_pb2.StageDemand(
        template_id="routing", stage_id="router", stage_version=3, model="qwen3-32b",
        sampling=common_pb2.SamplingParams(max_tokens=256, stop=["\n\n"], temperature=0.7))
    fp = StageFingerprint.from_demand(demand)
    assert fp.seed is None and fp.stop == ("\n\n",)
    assert fp.temperature == demand.sampling.temperature  # binary32 value, as sent on
    demand.sampling.seed = 0
    assert StageFingerprint.from_demand(demand).seed == 0
