"""Tenant isolation: an entry of tenant A is served to tenant B only for a shared stage."""

from __future__ import annotations

import pytest

from services.common.values.errors import InvalidArgument
from services.common.values.reads import ReadSet
from services.common.values.reuse_name import ReuseName
from services.csl.core import SubgraphLibrary
from tests.csl.factories import name, reads, shadow


def test_entry_of_one_tenant_is_not_served_to_another(lib: SubgraphLibrary) -> None:
    lib.put(name(1, tenant="alice"), b"alice's result", ReadSet.pure())
    assert lib.lookup(name(1, tenant="bob")) is None
    assert lib.lookup(name(1, tenant="alice")) is not None


def test_same_digest_under_another_tenant_is_a_miss(lib: SubgraphLibrary) -> None:
    alice = name(1, tenant="alice")
    lib.put(alice, b"alice's result", ReadSet.pure())
    assert lib.lookup(ReuseName("bob", alice.digest)) is None
    assert lib.lookup(ReuseName("", alice.digest)) is None


def test_shared_stage_entry_is_served_to_every_tenant(lib: SubgraphLibrary) -> None:
    lib.put(name(1, tenant="alice", shared=True), b"shared", ReadSet.pure())
    assert lib.lookup(name(1, tenant="bob", shared=True)) is not None
    assert lib.lookup(name(1, tenant="bob")) is None  # unshared stage: own namespace


def test_shadow_of_one_tenant_cannot_be_promoted_by_another(lib: SubgraphLibrary) -> None:
    lib.put_shadow(shadow(name(1, tenant="alice")))
    assert lib.promote(name(1, tenant="bob"), "b1") is None
    assert lib.promote(ReuseName("bob", name(1, tenant="alice").digest), "b1") is None
    assert lib.promote(name(1, tenant="alice"), "b1") is not None


def test_write_by_one_tenant_does_not_invalidate_another(lib: SubgraphLibrary) -> None:
    lib.put(name(1, tenant="alice"), b"a", reads(("notes", 0)))
    lib.put(name(1, tenant="bob"), b"b", reads(("notes", 0)))
    assert lib.write_records("alice", ["notes"]).invalidated == 1
    assert lib.lookup(name(1, tenant="bob")) is not None


def test_shared_record_write_invalidates_readers_in_every_tenant(lib: SubgraphLibrary) -> None:
    lib.put(name(1, tenant="alice"), b"a", reads(("corpus/doc", 0)))
    lib.put(name(1, tenant="bob", shared=True), b"s", reads(("corpus/doc", 0)))
    assert lib.write_records("", ["corpus/doc"]).invalidated == 2


def test_shared_entry_ignores_tenant_record_writes(lib: SubgraphLibrary) -> None:
    lib.put(name(1, tenant="bob", shared=True), b"s", reads(("corpus/doc", 0)))
    assert lib.write_records("alice", ["corpus/doc"]).invalidated == 0


def test_producer_of_another_tenant_is_rejected_for_shadows(lib: SubgraphLibrary) -> None:
    lib.put(name(1, tenant="alice"), b"a", ReadSet.pure())
    with pytest.raises(InvalidArgument, match="producers"):
        lib.put_shadow(shadow(name(2, tenant="bob"),
                              read_set=reads(producers=(name(1, tenant="alice"),))))


def test_tenant_entry_may_consume_a_shared_producer(lib: SubgraphLibrary) -> None:
    lib.put(name(1, tenant="x", shared=True), b"s", reads(("corpus/doc", 0)))
    assert lib.put(name(2, tenant="alice"), b"a",
                   reads(producers=(name(1, tenant="x", shared=True),)))
    assert lib.write_records("", ["corpus/doc"]).invalidated == 2
