"""Rendezvous hashing of reuse names onto csl shards."""

from __future__ import annotations

import pytest

from services.common.values.errors import InvalidArgument
from services.gateway.adapters.rendezvous import Rendezvous

KEYS = [f"acme{i:064x}".encode() for i in range(6000)]
SHARDS = ["csl-0.csl:50051", "csl-1.csl:50051", "csl-2.csl:50051"]


def _owners(shards: list[str]) -> dict[bytes, str]:
    ring = Rendezvous(shards)
    return {k: shards[ring.owner(k)] for k in KEYS}


def test_names_spread_evenly_over_shards() -> None:
    counts = {s: 0 for s in SHARDS}
    for owner in _owners(SHARDS).values():
        counts[owner] += 1
    assert all(abs(c - len(KEYS) / 3) < 0.05 * len(KEYS) for c in counts.values()), counts


def test_adding_a_shard_moves_only_its_share_and_only_to_it() -> None:
    before = _owners(SHARDS)
    after = _owners([*SHARDS, "csl-3.csl:50051"])
    moved = [k for k in KEYS if before[k] != after[k]]
    assert all(after[k] == "csl-3.csl:50051" for k in moved)
    assert abs(len(moved) / len(KEYS) - 1 / 4) < 0.03


def test_removing_a_shard_moves_only_its_own_names() -> None:
    before = _owners(SHARDS)
    after = _owners(SHARDS[:2])
    assert all(before[k] == SHARDS[2] for k in KEYS if before[k] != after[k])


def test_owner_does_not_depend_on_listing_order() -> None:
    assert _owners(SHARDS) == _owners(list(reversed(SHARDS)))


@pytest.mark.parametrize("shards", [[], ["a:1", "a:1"]])
def test_bad_shard_lists_are_refused_naming_the_setting(shards: list[str]) -> None:
    with pytest.raises(InvalidArgument, match="csl_shards"):
        Rendezvous(shards)
