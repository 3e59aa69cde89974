"""API keys → tenants. The tenant that scopes reuse comes only from here, never from a header or
field the caller sets (DESIGN.md §3 gateway)."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from services.common.errors import Unauthenticated

#: Tenant of every caller when authentication is switched off for local use.
LOCAL_TENANT = "local"


class Authenticator:
    """Maps ``Authorization: Bearer <key>`` to a tenant; refuses missing or unknown keys."""

    def __init__(self, api_keys: Mapping[str, str], enabled: bool = True) -> None:
        self._keys = dict(api_keys)
        self.enabled = enabled

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


__all__ = ["LOCAL_TENANT", "Authenticator"]
