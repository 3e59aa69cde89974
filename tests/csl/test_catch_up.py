"""Version catch-up and claims by name: what a shard that missed writes, and a gateway replica
that did not open a branch, rely on."""

from __future__ import annotations

from services.csl.core import SubgraphLibrary
from tests.csl.factories import name, reads, shadow


def test_write_reports_the_sequence_before_it(lib: SubgraphLibrary) -> None:
    assert lib.write_records("acme", ["r1"]).prior_seq == 0
    outcome = lib.write_records("acme", ["r2", "r3"])
    assert outcome.prior_seq == 1 and [v.version for v in outcome.versions] == [2, 3]


def test_adopted_version_invalidates_readers_exactly_as_the_write(lib: SubgraphLibrary) -> None:
    lib.write_records("acme", ["r1"])
    assert lib.put(name(1), b"old answer", reads(("r1", 1)))
    assert lib.put(name(2), b"unrelated", reads(("r2", 0)))
    assert lib.adopt_versions([(("acme", "r1"), 7)]) == 1
    assert lib.lookup(name(1)) is None  # the stale reader is gone
    assert lib.lookup(name(2)) is not None
    assert lib.record_version("acme", "r1") == 7 and lib.stats().write_seq == 7
    assert lib.write_records("acme", ["r9"]).versions[0].version == 8  # numbering moves past it


def test_adoption_never_moves_a_version_down(lib: SubgraphLibrary) -> None:
    lib.write_records("acme", ["r1", "r1", "r1"])
    assert lib.put(name(1), b"fresh", reads(("r1", 3)))
    assert lib.adopt_versions([(("acme", "r1"), 2)]) == 0
    assert lib.record_version("acme", "r1") == 3 and lib.lookup(name(1)) is not None


def test_adopted_shared_record_invalidates_every_tenants_incomplete_entries(
        lib: SubgraphLibrary) -> None:
    assert lib.put(name(1), b"unsure", reads(complete=False))
    assert lib.put(name(2, tenant="globex"), b"unsure too", reads(complete=False))
    assert lib.adopt_versions([(("", "doc"), 4), (("acme", "x"), 5)]) == 2
    assert lib.lookup(name(1)) is None and lib.lookup(name(2, tenant="globex")) is None


def test_adopted_versions_survive_a_restart(lib: SubgraphLibrary, tmp_path) -> None:  # noqa: ANN001
    from tests.csl.factories import library

    lib.adopt_versions([(("acme", "r1"), 11)])
    lib.close()
    with library(tmp_path / "csl") as again:
        assert again.record_version("acme", "r1") == 11 and again.stats().write_seq == 11


def test_versions_since_pages_in_order_and_never_splits_a_version(lib: SubgraphLibrary) -> None:
    lib.write_records("acme", ["a", "b", "c"])  # 1, 2, 3
    lib.adopt_versions([(("globex", "z"), 2)])  # repeats version 2 under another record
    assert lib.versions_since(0, 2) == [(("acme", "a"), 1), (("acme", "b"), 2),
                                        (("globex", "z"), 2)]
    assert lib.versions_since(2, 2) == [(("acme", "c"), 3)]
    assert lib.versions_since(3, 2) == []


def test_claim_promotes_the_one_shadow_among_the_given_branches(lib: SubgraphLibrary) -> None:
    assert lib.put_shadow(shadow(name(1), branch="b1", candidate="h1", result=b"fill"))
    assert lib.claim(name(1), {"other"}) is None  # not among the branches held in scope
    claimed = lib.claim(name(1), {"b1", "other"})
    assert claimed is not None and (claimed.result, claimed.branch_id, claimed.candidate) == (
        b"fill", "b1", "h1")
    assert lib.lookup(name(1)) is not None  # confirmed now
    assert lib.claim(name(1), {"b1"}) is None  # returned once


def test_claim_of_a_name_two_branches_filled_is_a_miss(lib: SubgraphLibrary) -> None:
    assert lib.put_shadow(shadow(name(1), branch="b1"))
    assert lib.put_shadow(shadow(name(1), branch="b2"))
    assert lib.claim(name(1), {"b1", "b2"}) is None
    assert lib.lookup(name(1)) is None  # ambiguity promotes nothing


def test_claim_refuses_a_stale_shadow(lib: SubgraphLibrary) -> None:
    assert lib.put_shadow(shadow(name(1), read_set=reads(("r1", 0))))
    lib.write_records("acme", ["r1"])
    assert lib.claim(name(1), {"b1"}) is None and lib.lookup(name(1)) is None
