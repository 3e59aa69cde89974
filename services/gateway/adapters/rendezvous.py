"""Rendezvous (highest-random-weight) hashing of reuse names onto library shards.

Every shard scores every name with a keyed hash and the highest score owns the name, so all
gateways agree on the owner without coordination, and adding a shard moves exactly the names
the new shard now scores highest on (about 1/(N+1) of them), each from wherever it was; removing
one moves only its own names. Scores depend on the shard's identity (its configured target, a
stable StatefulSet DNS name in Kubernetes), never on the order shards are listed in.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from services.common.values.errors import InvalidArgument


class Rendezvous:
    """Owner of each key among a fixed set of shard identities."""

    __slots__ = ("_keys",)

    def __init__(self, shards: Sequence[str]) -> None:
        if not shards:
            raise InvalidArgument("csl_shards", "at least one shard")
        if len(set(shards)) != len(shards):
            raise InvalidArgument("csl_shards", "each shard listed once")
        self._keys = [hashlib.blake2b(s.encode(), digest_size=16).digest() for s in shards]

    def owner(self, key: bytes) -> int:
        """Index of the shard that owns ``key``."""
        best, best_score = 0, -1
        for i, salt in enumerate(self._keys):
            score = int.from_bytes(hashlib.blake2b(key, digest_size=8, key=salt).digest(), "big")
            if score > best_score:
                best, best_score = i, score
        return best


__all__ = ["Rendezvous"]
