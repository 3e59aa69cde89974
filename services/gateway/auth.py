"""API keys → tenants. The tenant that scopes reuse comes only from here, never from a header or
field the caller sets (DESIGN.md §3 gateway)."""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
from collections.abc import Mapping
from pathlib import Path

import yaml

from services.common.values.errors import Unauthenticated

log = logging.getLogger(__name__)

#: Tenant of every caller when authentication is switched off for local use.
LOCAL_TENANT = "local"


class Authenticator:
    """Maps ``Authorization: Bearer <key>`` to a tenant; refuses missing or unknown keys."""

    def __init__(self, api_keys: Mapping[str, str], enabled: bool = True) -> None:
        self._keys = dict(api_keys)
        self.enabled = enabled

    def replace_keys(self, api_keys: Mapping[str, str]) -> None:
        """Swap the key table (a reloaded key file); calls in flight keep the tenant they got."""
        self._keys = dict(api_keys)

    @property
    def key_count(self) -> int:
        """How many keys are known (never the keys themselves)."""
        return len(self._keys)

    def tenant(self, authorization: str | None) -> str:
        """The caller's tenant from the raw authorization value."""
        if not self.enabled:
            return LOCAL_TENANT
        if not authorization:
            raise Unauthenticated("missing API key: send 'authorization: Bearer <key>'")
        scheme, _, key = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise Unauthenticated("malformed authorization: expected 'Bearer <key>'")
        key = key.strip()
        for known, tenant in self._keys.items():
            if hmac.compare_digest(known.encode(), key.encode()):
                return tenant
        raise Unauthenticated("unknown API key")


class KeyFileError(ValueError):
    """The key file is unreadable or not a mapping of key to tenant (names the file only)."""


def read_key_file(path: str | Path) -> dict[str, str]:
    """``{api key: tenant}`` from a YAML mapping file (mounted from a Secret in Kubernetes).
    Errors name the file and what is wrong, never a key."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise KeyFileError(f"api_keys_file: cannot read {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError:
        raise KeyFileError(f"api_keys_file: {path} is not valid YAML") from None
    if not isinstance(data, dict) or not data:
        raise KeyFileError(f"api_keys_file: {path} must be a non-empty mapping of key: tenant")
    keys = {}
    for key, tenant in data.items():
        if (not isinstance(key, str) or not key.strip() or not isinstance(tenant, str)
                or not tenant.strip()):
            raise KeyFileError(f"api_keys_file: {path}: every entry must map a non-empty "
                               f"string key to a non-empty tenant name")
        keys[key.strip()] = tenant.strip()
    return keys


class KeyFileWatcher:
    """Reloads an ``Authenticator``'s keys when the key file changes, without a restart.

    Polls the file's identity (mtime, size, inode: a Kubernetes Secret update swaps a symlink)
    every ``interval_s`` in a worker thread; a file that fails to parse keeps the previous keys
    and logs the error (which names the file, never a key)."""

    def __init__(self, auth: Authenticator, path: str, interval_s: float = 1.0) -> None:
        self.auth, self.path, self.interval_s = auth, path, interval_s
        self.reloads = 0
        self._seen: tuple[int, int, int] | None = self._identity()  # the keys loaded at start
        self._task: asyncio.Task[None] | None = None

    def _identity(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    async def check(self) -> bool:
        """Reload when the file changed; True when new keys were installed."""
        seen = await asyncio.to_thread(self._identity)
        if seen is None or seen == self._seen:
            return False
        try:
            keys = await asyncio.to_thread(read_key_file, self.path)
        except KeyFileError as exc:
            log.warning("API keys not reloaded, keeping the previous ones: %s", exc)
            self._seen = seen  # do not retry a broken file until it changes again
            return False
        self._seen = seen
        self.auth.replace_keys(keys)
        self.reloads += 1
        log.info("API keys reloaded from %s: %d keys", self.path, len(keys))
        return True

    def start(self) -> None:
        """Begin polling (owned task; ``close`` cancels and awaits it)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="api-key-file-watch")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.check()
            except Exception:  # noqa: BLE001 - a watcher never dies of one bad poll
                log.exception("API key file check failed")

    async def close(self) -> None:
        """Stop polling."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None


__all__ = ["LOCAL_TENANT", "Authenticator", "KeyFileError", "KeyFileWatcher", "read_key_file"]
