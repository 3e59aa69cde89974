"""The sim's LRU helper (``sim.recent``): a hit is not recomputed and becomes the most recently
used; beyond the size the least recently used goes; a miss computes with the key absent."""

from __future__ import annotations

from services.engine_agent.sim.recent import recent


def test_hits_refresh_misses_compute_and_the_oldest_goes() -> None:
    cache: dict[str, int] = {}
    calls: list[str] = []

    def compute(key: str) -> int:
        calls.append(key)
        assert key not in cache  # a miss may scan the others without finding itself
        return len(key)

    for key in ("a", "bb", "a", "ccc"):
        assert recent(cache, key, lambda k=key: compute(k), size=2) == len(key)
    assert calls == ["a", "bb", "ccc"]  # "a" hit the second time
    assert list(cache) == ["a", "ccc"]  # "bb" was the least recently used
