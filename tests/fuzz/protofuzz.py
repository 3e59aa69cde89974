"""Hypothesis strategies for protobuf messages from their descriptors, and a mesh served from a
background event loop so that synchronous hypothesis tests can call it with blocking stubs.

Values mix what a careless or hostile client sends (empty, huge, NaN, negative, unknown enum
numbers, deep nesting) with plausible ones (the served model, short ids, ``template/stage``
coordinates), so that inputs also get past the first validation into the services' cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from google.protobuf import descriptor as d
from google.protobuf.message import Message
from hypothesis import strategies as st

from tests.factories import MODEL

FD = d.FieldDescriptor
PLAUSIBLE_TEXT = ["", MODEL, "r1", "wf-1", "tenant-a", "router/route", "react/next", "a" * 300,
                  "engine-0", "fill/b1/x/0", "\x00", "ünïcödé", "../../etc/passwd"]
INT_EDGES = [0, 1, -1, 2, 7, 64, 2**31 - 1, -(2**31)]


def _text() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(PLAUSIBLE_TEXT), st.text(max_size=40),
                     st.text(min_size=5000, max_size=6000, alphabet="xyz "))


def _scalar(field: d.FieldDescriptor) -> st.SearchStrategy[Any]:
    t = field.type
    if t in (FD.TYPE_DOUBLE, FD.TYPE_FLOAT):
        return st.one_of(st.sampled_from([0.0, 0.5, 1.0, -1.0, 1e9, float("nan"), float("inf"),
                                          -float("inf")]),
                         st.floats(allow_nan=True, width=32 if t == FD.TYPE_FLOAT else 64))
    if t in (FD.TYPE_INT32, FD.TYPE_SINT32, FD.TYPE_SFIXED32):
        return st.one_of(st.sampled_from(INT_EDGES), st.integers(-(2**31), 2**31 - 1))
    if t in (FD.TYPE_INT64, FD.TYPE_SINT64, FD.TYPE_SFIXED64):
        return st.one_of(st.sampled_from([*INT_EDGES, 2**63 - 1]), st.integers(-(2**63), 2**63 - 1))
    if t in (FD.TYPE_UINT32, FD.TYPE_FIXED32):
        return st.one_of(st.sampled_from([0, 1, 8, 2**32 - 1]), st.integers(0, 2**32 - 1))
    if t in (FD.TYPE_UINT64, FD.TYPE_FIXED64):
        return st.one_of(st.sampled_from([0, 1, 8, 2**64 - 1]), st.integers(0, 2**64 - 1))
    if t == FD.TYPE_BOOL:
        return st.booleans()
    if t == FD.TYPE_STRING:
        return _text()
    if t == FD.TYPE_BYTES:
        return st.one_of(st.binary(max_size=64), st.just(b"\x00" * 70_000))
    if t == FD.TYPE_ENUM:
        known = [v.number for v in field.enum_type.values]
        return st.one_of(st.sampled_from(known), st.integers(-5, 99))  # unknown numbers too
    raise TypeError(f"unsupported field type {t} of {field.full_name}")


def _is_map(field: d.FieldDescriptor) -> bool:
    return (field.type == FD.TYPE_MESSAGE and field.message_type.GetOptions().map_entry)


def messages(desc: d.Descriptor, cls: type[Message] | None = None,
             depth: int = 3) -> st.SearchStrategy[Message]:
    """Messages of ``desc``: every field independently absent or set, nested to ``depth``."""
    if cls is None:
        from google.protobuf import message_factory
        cls = message_factory.GetMessageClass(desc)
    parts: dict[str, st.SearchStrategy[Any]] = {}
    for field in desc.fields:
        if _is_map(field):
            key_f, value_f = field.message_type.fields_by_name["key"], \
                field.message_type.fields_by_name["value"]
            if depth <= 0 and value_f.type == FD.TYPE_MESSAGE:
                continue  # like message fields: nothing nested below the depth
            value = (messages(value_f.message_type, depth=depth - 1)
                     if value_f.type == FD.TYPE_MESSAGE else _scalar(value_f))
            parts[field.name] = st.dictionaries(_scalar(key_f), value, max_size=3)
            continue
        if field.type == FD.TYPE_MESSAGE:
            if depth <= 0:
                continue
            one = messages(field.message_type, depth=depth - 1)
        else:
            one = _scalar(field)
        if field.is_repeated:
            parts[field.name] = st.lists(one, max_size=4)
        else:
            parts[field.name] = one
    names = list(parts)

    @st.composite
    def build(draw: st.DrawFn) -> Message:
        msg = cls()
        for name in names:
            if not draw(st.booleans()):
                continue
            value = draw(parts[name])
            field = desc.fields_by_name[name]
            target = getattr(msg, name) if field.is_repeated or \
                field.type == FD.TYPE_MESSAGE else None
            if _is_map(field):
                for k, v in value.items():
                    if isinstance(v, Message):
                        target[k].CopyFrom(v)
                    else:
                        target[k] = v
            elif field.is_repeated:
                if field.type == FD.TYPE_MESSAGE:
                    for v in value:
                        target.add().CopyFrom(v)
                else:
                    target.extend(value)
            elif field.type == FD.TYPE_MESSAGE:
                target.CopyFrom(value)
            else:
                setattr(msg, name, value)
        return msg

    return build()


class BackgroundMesh:
    """Engine agent, csl, admission, delivery and a gateway (auth off, HTTP front on) served
    from an event loop in a thread; ``tasks()`` counts that loop's live tasks."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.loop = asyncio.new_event_loop()
        self.addresses: dict[str, str] = {}
        self.http_port: int | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="fuzz-mesh", daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._serve())
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        from services.admission.config import AdmissionSettings
        from services.admission.server import build_runtime as build_admission
        from services.delivery.config import DeliverySettings
        from services.delivery.server import build_runtime as build_delivery
        from tests.factories import csl_service, engine_agent, gateway

        self._stop = asyncio.Event()
        async with contextlib.AsyncExitStack() as stack:
            eng = await stack.enter_async_context(engine_agent(engine_id="engine-0"))
            csl = await stack.enter_async_context(csl_service(self.folder / "csl"))
            adm = await build_admission(AdmissionSettings(engines=[eng.address], metrics_port=-1,
                                                          grace_s=0.2))
            await adm.start()
            stack.push_async_callback(adm.shutdown)
            dlv = await build_delivery(DeliverySettings(engines=[f"engine-0={eng.address}"],
                                                        metrics_port=-1, grace_s=0.2))
            await dlv.start()
            stack.push_async_callback(dlv.shutdown)
            gw = await stack.enter_async_context(gateway(
                [eng.address], csl=csl.address, admission=adm.address, delivery=dlv.address,
                http_port=0))
            self.addresses = {"dynbranch.v1.EngineAgent": eng.address,
                              "dynbranch.v1.SubgraphLibrary": csl.address,
                              "dynbranch.v1.Admission": adm.address,
                              "dynbranch.v1.Delivery": dlv.address,
                              "dynbranch.v1.Gateway": gw.address}
            self.http_port = gw.http_port
            self._ready.set()
            await self._stop.wait()

    def tasks(self) -> int:
        """Live tasks on the mesh's loop (read from the loop's thread)."""
        async def count() -> int:
            return len(asyncio.all_tasks()) - 1
        return asyncio.run_coroutine_threadsafe(count(), self.loop).result(10)

    @contextlib.contextmanager
    def running(self) -> Iterator[BackgroundMesh]:
        """Start, yield once serving, stop and join."""
        self._thread.start()
        self._ready.wait(60)
        if self._error is not None:
            raise self._error
        try:
            yield self
        finally:
            if self._stop is not None:
                self.loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(30)


__all__ = ["BackgroundMesh", "messages"]
