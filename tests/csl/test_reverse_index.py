"""ReverseIndex: the write cascade invalidates exactly A (Proposition A.5) and cleans up."""

from __future__ import annotations

from services.csl.entries import EntryMeta, tenant_of_key
from services.csl.reverse_index import ReverseIndex


def meta(eid: int, rkeys: tuple = (), producers: tuple = (), incomplete: bool = False,
         tenant: str = "acme") -> EntryMeta:
    key = (tenant + f"{eid:064x}").encode()
    return EntryMeta(eid, key, b"", 0, rkeys, producers, incomplete, 10, 0.0)


def build(*metas: EntryMeta) -> tuple[ReverseIndex, dict[int, EntryMeta]]:
    index = ReverseIndex()
    for m in metas:
        index.add(m.eid, m.rkeys, m.producers, tenant_of_key(m.key) if m.incomplete else None)
    return index, {m.eid: m for m in metas}


def remove(index: ReverseIndex, by_id: dict[int, EntryMeta], eids: list[int]) -> None:
    index.retire([by_id.pop(e) for e in eids])


DOC = ("acme", "doc")
OTHER = ("acme", "other")


def test_cascade_returns_direct_readers_and_their_descendants() -> None:
    index, _ = build(meta(1, (DOC,)), meta(2, producers=(1,)), meta(3, producers=(2,)),
                     meta(4, (OTHER,)), meta(5, producers=(4,)))
    assert sorted(index.cascade([DOC], writer=None)) == [1, 2, 3]


def test_cascade_invalidates_an_entry_that_loses_one_of_two_producers() -> None:
    index, _ = build(meta(1, (DOC,)), meta(2, (OTHER,)), meta(3, producers=(1, 2)))
    assert sorted(index.cascade([DOC], writer=None)) == [1, 3]


def test_cascade_visits_a_diamond_once() -> None:
    index, _ = build(meta(1, (DOC,)), meta(2, producers=(1,)), meta(3, producers=(1,)),
                     meta(4, producers=(2, 3)))
    assert sorted(index.cascade([DOC], writer=None)) == [1, 2, 3, 4]


def test_cascade_includes_incomplete_provenance_of_the_writers_namespace() -> None:
    index, _ = build(meta(1, incomplete=True), meta(2, producers=(1,)), meta(3, (OTHER,)),
                     meta(4, incomplete=True, tenant="other"))
    assert sorted(index.cascade([DOC], writer="acme")) == [1, 2]


def test_shared_write_reaches_incomplete_provenance_in_every_namespace() -> None:
    index, _ = build(meta(1, incomplete=True), meta(2, incomplete=True, tenant="other"),
                     meta(3, incomplete=True, tenant=""))
    assert sorted(index.cascade([("", "corpus")], writer="")) == [1, 2, 3]


def test_cascade_of_an_unread_record_is_empty() -> None:
    index, _ = build(meta(1, (OTHER,)))
    assert index.cascade([DOC], writer=None) == []


def test_retiring_every_entry_leaves_no_references() -> None:
    index, by_id = build(meta(1, (DOC,)), meta(2, (DOC, OTHER), producers=(1,)),
                         meta(3, producers=(1, 2), incomplete=True))
    assert index.references() == 7
    remove(index, by_id, index.cascade([DOC], writer="acme"))
    assert index.references() == 0
    assert index.readers_of(OTHER) == frozenset()


def test_retiring_a_closure_cleans_edges_into_surviving_producers() -> None:
    index, by_id = build(meta(1, (DOC,)), meta(2, (OTHER,)), meta(3, producers=(1, 2)))
    remove(index, by_id, index.cascade([DOC], writer=None))
    assert index.dependents_of(2) == frozenset()
    assert index.references() == 1  # entry 2's read of OTHER


def test_closure_of_a_producer_contains_all_its_transitive_dependents() -> None:
    index, _ = build(meta(1), meta(2, producers=(1,)), meta(3, producers=(2,)), meta(4))
    assert sorted(index.closure([1])) == [1, 2, 3]


def test_cascade_work_is_linear_in_what_it_touches() -> None:
    n = 20_000
    chain = [meta(1, (DOC,))] + [meta(i, producers=(i - 1,)) for i in range(2, n + 1)]
    index, by_id = build(*chain, *[meta(n + i, (OTHER,)) for i in range(1, 1001)])
    victims = index.cascade([DOC], writer=None)
    assert len(victims) == n
    remove(index, by_id, victims)
    assert index.references() == 1000
