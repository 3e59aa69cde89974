"""A small least-recently-used cache over a plain dict, for the sim's incremental caches.

The tokenizer, the block hasher and the prefix digests each keep the last few values they
computed; the first two also scan their keys for a known prefix of a new one, so the cache is a
plain ``dict`` they can iterate: insertion order is use order, and (unlike an ``OrderedDict``,
whose iterator hashes every key) iterating long tuple or string keys costs nothing per key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


def recent(cache: dict[K, V], key: K, compute: Callable[[], V], size: int) -> V:
    """``cache[key]``, computed on a miss; the entry becomes the most recently used and the
    least recently used beyond ``size`` entries are dropped. ``compute`` runs while ``key`` is
    not in the cache, so it may scan the others."""
    value = cache.pop(key, None)
    if value is None:
        value = compute()
    cache[key] = value
    while len(cache) > size:
        del cache[next(iter(cache))]
    return value


__all__ = ["recent"]
