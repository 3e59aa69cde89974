"""Tenants come only from the API key, over gRPC and HTTP; one tenant's results never serve
another (DESIGN.md §3 gateway, §5.2)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from services.common.pb import gateway_pb2
from services.common.values.errors import Unauthenticated
from services.gateway.auth import LOCAL_TENANT, Authenticator
from services.gateway.client import GatewayClient
from tests.factories import MODEL, call_request, csl_service, engine_agent, gateway

KEYS = {"key-a": "tenant-a", "key-b": "tenant-b"}
LIBRARY, ENGINE = gateway_pb2.RESULT_SOURCE_LIBRARY, gateway_pb2.RESULT_SOURCE_ENGINE
BODY = {"model": MODEL, "prompt": "what is our refund policy?", "max_tokens": 6, "temperature": 0}


@asynccontextmanager
async def mesh(tmp_path: Path, **settings: Any) -> AsyncIterator[Any]:
    """Engine, csl and a gateway with gRPC and HTTP fronts."""
    async with csl_service(tmp_path / "csl") as csl, engine_agent() as eng, \
            gateway([eng.address], csl=csl.address, http_port=0, **settings) as gw:
        yield gw


def bearer(key: str) -> dict[str, str]:
    """The HTTP authorization header for ``key``."""
    return {"authorization": f"Bearer {key}"}


def test_authenticator_maps_keys_and_refuses_the_rest() -> None:
    auth = Authenticator(KEYS)
    assert auth.tenant("Bearer key-a") == "tenant-a" and auth.tenant("bearer  key-b ") == "tenant-b"
    for header in (None, "", "Bearer ", "Basic key-a", "key-a", "Bearer key-c"):
        with pytest.raises(Unauthenticated):
            auth.tenant(header)
    assert Authenticator({}, enabled=False).tenant(None) == LOCAL_TENANT


@pytest.mark.parametrize("key", [None, "key-c"], ids=["missing", "unknown"])
async def test_missing_or_unknown_key_is_refused_over_grpc_and_http(tmp_path: Path,
                                                                   key: str | None) -> None:
    async with mesh(tmp_path, auth=True, api_keys=KEYS) as gw:
        async with GatewayClient(gw.address, api_key=key or "") as client:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await client.call(call_request(), timeout_s=5)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gw.http_port}") as raw:
            headers = bearer(key) if key else {}
            replies = [await raw.post("/v1/completions", json=BODY, headers=headers),
                       await raw.get("/v1/models", headers=headers)]
    for reply in replies:
        assert reply.status_code == 401
        assert reply.json()["error"]["type"] == "authentication_error"


async def test_a_valid_key_is_served_over_grpc_and_http(tmp_path: Path) -> None:
    async with mesh(tmp_path, auth=True, api_keys=KEYS) as gw:
        async with GatewayClient(gw.address, api_key="key-a") as client:
            reply = await client.call(call_request(), timeout_s=5)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gw.http_port}") as raw:
            http = await raw.post("/v1/completions", json=BODY, headers=bearer("key-b"))
    assert reply.text and reply.reuse_name.startswith("tenant-a/")
    assert http.status_code == 200
    assert http.headers["x-dynbranch-reuse-name"].startswith("tenant-b/")


async def test_auth_off_serves_everyone_as_the_local_tenant(tmp_path: Path) -> None:
    async with mesh(tmp_path, auth=False) as gw:
        async with GatewayClient(gw.address) as anonymous, \
                GatewayClient(gw.address, api_key="anything") as keyed:
            first = await anonymous.call(call_request(), timeout_s=5)
            second = await keyed.call(call_request(), timeout_s=5)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gw.http_port}") as raw:
            http = [await raw.post("/v1/completions", json=BODY, headers=h)
                    for h in ({}, bearer("whatever"))]
    assert first.reuse_name.startswith(f"{LOCAL_TENANT}/") and second.reuse_name == first.reuse_name
    assert (first.source, second.source) == (ENGINE, LIBRARY)  # one tenant: one namespace
    assert [r.headers["x-dynbranch-source"] for r in http] == ["engine", "library"]
    assert http[0].headers["x-dynbranch-reuse-name"].startswith(f"{LOCAL_TENANT}/")


async def test_one_tenants_result_is_never_served_to_another_over_grpc(tmp_path: Path) -> None:
    async with mesh(tmp_path, auth=True, api_keys=KEYS) as gw:
        async with GatewayClient(gw.address, api_key="key-a") as a, \
                GatewayClient(gw.address, api_key="key-b") as b:
            a1, a2 = [await a.call(call_request(), timeout_s=5) for _ in range(2)]
            b1, b2 = [await b.call(call_request(), timeout_s=5) for _ in range(2)]
    assert (a1.source, a2.source) == (ENGINE, LIBRARY)  # the library works for A ...
    assert (b1.source, b2.source) == (ENGINE, LIBRARY)  # ... and B misses A's entry
    assert a1.text == b1.text and a1.reuse_name != b1.reuse_name


async def test_one_tenants_result_is_never_served_to_another_over_http(tmp_path: Path) -> None:
    async with mesh(tmp_path, auth=True, api_keys=KEYS) as gw:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gw.http_port}") as raw:
            async def source(key: str, **extra: str) -> str:
                reply = await raw.post("/v1/completions", json=BODY,
                                       headers={**bearer(key), **extra})
                assert reply.status_code == 200, reply.text
                return reply.headers["x-dynbranch-source"]
            assert [await source("key-a") for _ in range(2)] == ["engine", "library"]
            # A tenant-like header a caller sets is ignored: the key decides.
            spoof = {"x-dynbranch-tenant": "tenant-a", "x-tenant-id": "tenant-a"}
            assert await source("key-b", **spoof) == "engine"
            assert await source("key-b") == "library"


async def test_api_keys_reload_from_their_file_without_a_restart_and_never_reach_the_logs(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import asyncio
    import logging
    import os

    caplog.set_level(logging.DEBUG)
    keys = tmp_path / "keys.yaml"
    keys.write_text("sk-old-5f1e: tenant-a\n")
    async with mesh(tmp_path, auth=True, api_keys_file=str(keys), log_level="DEBUG") as gw:
        watcher = gw.key_watcher
        watcher.interval_s = 0.05
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{gw.http_port}") as raw:
            async def status(key: str) -> int:
                return (await raw.get("/v1/models", headers=bearer(key))).status_code

            assert await status("sk-old-5f1e") == 200 and await status("sk-new-77aa") == 401
            # a Secret update swaps the file; same size on purpose: the inode/mtime tell
            fresh = tmp_path / "keys.new"
            fresh.write_text("sk-new-77aa: tenant-a\n")
            os.replace(fresh, keys)
            for _ in range(100):
                if watcher.reloads:
                    break
                await asyncio.sleep(0.05)
            assert watcher.reloads == 1
            assert await status("sk-new-77aa") == 200 and await status("sk-old-5f1e") == 401
            keys.write_text("not: [a mapping")  # broken: the previous keys stay
            await asyncio.sleep(0.3)
            assert await status("sk-new-77aa") == 200 and watcher.reloads == 1
    assert "sk-old-5f1e" not in caplog.text and "sk-new-77aa" not in caplog.text
    assert "API keys reloaded" in caplog.text and "keeping the previous ones" in caplog.text


def test_a_broken_key_file_fails_start_up_naming_the_file(tmp_path: Path) -> None:
    from services.gateway.auth import KeyFileError, read_key_file

    (tmp_path / "k.yaml").write_text("- just\n- a list\n")
    with pytest.raises(KeyFileError, match=r"api_keys_file: .*k.yaml must be a non-empty mapping"):
        read_key_file(tmp_path / "k.yaml")
    with pytest.raises(KeyFileError, match="cannot read"):
        read_key_file(tmp_path / "absent.yaml")
