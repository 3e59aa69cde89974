"""Shadows in memory (``shadows.ShadowStore``): a byte bound, settlement that keeps only the
chosen candidate and refuses late losers, and expiry of shadows and settlement records."""

from __future__ import annotations

from services.common.values.reads import ReadSet, Shadow
from services.csl.shadows import HeldShadow, ShadowStore
from tests.csl.factories import name


def held(sid: int, branch: str, candidate: str, size: int = 10, expires: float = 100.0
         ) -> HeldShadow:
    n = name(f"stage-{candidate}")
    shadow = Shadow(n, branch, candidate, 0, f"fill/{branch}/{candidate}/0", b"r",
                    ReadSet((), complete=True))
    return HeldShadow(sid, f"key-{candidate}".encode(), shadow, (), (), 0, expires, size)


def test_the_byte_bound_refuses_what_does_not_fit() -> None:
    store = ShadowStore(budget_bytes=25)
    assert store.add(held(1, "b", "x")) and store.add(held(2, "b", "y"))
    assert not store.add(held(3, "b", "z"))
    assert store.bytes == 20 and len(store) == 2
    assert store.take(b"key-x", "b") is not None and store.bytes == 10 and not store.holds(1)


def test_settling_keeps_the_chosen_candidate_and_refuses_other_late_shadows() -> None:
    store = ShadowStore(budget_bytes=1000)
    store.add(held(1, "b", "x"))
    store.add(held(2, "b", "y"))
    assert store.settle("b", "y", until=50.0) == 1
    assert store.get(b"key-y", "b") is not None and store.get(b"key-x", "b") is None
    assert store.accepts("b", "y") and not store.accepts("b", "x")
    assert store.accepts("other", "x")


def test_shadows_and_settlements_expire() -> None:
    store = ShadowStore(budget_bytes=1000)
    store.add(held(1, "b", "x", expires=10.0))
    store.settle("c", "", until=5.0)
    assert not store.accepts("c", "x")
    assert store.expire(5.0) == 0 and store.accepts("c", "x")  # the settlement record went
    assert store.expire(10.0) == 1 and len(store) == 0 and store.bytes == 0
