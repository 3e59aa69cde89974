"""The two values the plugin shares with dynbranch, copied: the plugin runs in vLLM's container,
which has no dynbranch. ``tests/engine_agent/test_vllm_plugin_package.py`` checks that they stay
equal to ``services.common.values.leases``."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

#: Tokens per chunk of the engine-queue delay proxy κ (LADS §3.4).
KAPPA_CHUNK_TOKENS = 512


def prefix_digest(block_hashes: Iterable[int | str | bytes]) -> str:
    """Digest of a prefix's chained block hashes (the last hash names the whole prefix)."""
    h = hashlib.blake2b(digest_size=16)
    for block_hash in block_hashes:
        h.update(repr(block_hash).encode())
        h.update(b"\x00")
    return h.hexdigest()


__all__ = ["KAPPA_CHUNK_TOKENS", "prefix_digest"]
