"""Servicers for services whose logic has not landed yet: they start, report health, and refuse
every call with UNIMPLEMENTED and a message saying what is missing (never a fake success)."""

from __future__ import annotations

from typing import Any

from services.common.errors import Unimplemented


def unbuilt_servicer(base: type, service: str, why: str) -> Any:
    """An instance of ``base`` (a generated ``XServicer``) whose every method raises."""
    def method(name: str):  # noqa: ANN202 - closure factory
        async def refuse(self: Any, request: Any, context: Any) -> Any:
            raise Unimplemented(f"{service}.{name} is not available yet: {why}")
        return refuse

    names = [n for n in vars(base) if not n.startswith("_") and callable(getattr(base, n))]
    return type(f"Unbuilt{base.__name__}", (base,), {n: method(n) for n in names})()


__all__ = ["unbuilt_servicer"]
