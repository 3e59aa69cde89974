"""The workflow tags of the code running now, in a context variable.

``with tagged(workflow_type="routing", workflow_id="wf-1"):`` sets the tags for the block; a
nested block overrides the fields it names and inherits the others (``None`` inherits, ``""``
clears a field), and leaving a block restores the tags around it. Being a ``ContextVar``, the
tags follow the code, not the thread: every asyncio task copies them when it is created (so a
task started inside a block keeps the block's tags), and concurrent tasks never see each other's.
A framework adds what it knows of the running code through a source (``add_source``; the
LangGraph one is ``langgraph``), in the fields the blocks leave empty. Protocol-free; the HTTP
side is ``transport``.
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: Tag field -> the request header the gateway's HTTP front reads it from
#: (``services/gateway/http/front.py``: ``TAG_HEADERS`` and ``HEADER_STAGE``).
HEADERS = {"workflow_type": "x-dynbranch-workflow-type",
           "workflow_id": "x-dynbranch-workflow-id",
           "agent_id": "x-dynbranch-agent-id",
           "stage": "x-dynbranch-stage"}
#: The longest tag value the front accepts.
MAX_TAG_CHARS = 256


@dataclasses.dataclass(frozen=True, slots=True)
class Tags:
    """One request's workflow tags; an empty field is not sent. ``stage`` is
    ``template_id/stage_id`` (a stage of a registered template)."""

    workflow_type: str = ""
    workflow_id: str = ""
    agent_id: str = ""
    stage: str = ""

    def headers(self) -> dict[str, str]:
        """The ``x-dynbranch-*`` headers of the non-empty fields."""
        return {HEADERS[f.name]: value for f in dataclasses.fields(self)
                if (value := getattr(self, f.name))}

    def merged(self, *, workflow_type: str | None = None, workflow_id: str | None = None,
               agent_id: str | None = None, stage: str | None = None) -> Tags:
        """These tags with the named fields replaced (``None`` keeps a field; values are
        checked and stripped)."""
        given = {"workflow_type": workflow_type, "workflow_id": workflow_id,
                 "agent_id": agent_id, "stage": stage}
        changes = {name: _checked(name, value) for name, value in given.items()
                   if value is not None}
        return dataclasses.replace(self, **changes)


    def filled(self, *, workflow_type: str = "", workflow_id: str = "", agent_id: str = "",
               stage: str = "") -> Tags:
        """These tags with each empty field set to the value given for it (checked)."""
        given = {"workflow_type": workflow_type, "workflow_id": workflow_id,
                 "agent_id": agent_id, "stage": stage}
        return self.merged(**{name: value for name, value in given.items()
                              if value and not getattr(self, name)})


def _checked(name: str, value: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected a str, got {type(value).__name__}")
    value = value.strip()
    if len(value) > MAX_TAG_CHARS:
        raise ValueError(f"{name}: at most {MAX_TAG_CHARS} characters, got {len(value)}")
    if not value.isascii() or not value.isprintable():
        raise ValueError(f"{name}: printable ASCII only (it travels in an HTTP header), "
                         f"got {value!r}")
    if name == "stage" and value:
        template_id, _, stage_id = value.partition("/")
        if not template_id or not stage_id:
            raise ValueError(f"stage: expected 'template_id/stage_id', got {value!r}")
    return value


#: No tags (frozen, so one value serves as every context's default).
NO_TAGS = Tags()
_TAGS: contextvars.ContextVar[Tags] = contextvars.ContextVar("dynbranch_tags", default=NO_TAGS)


#: Functions that fill in the tags a framework knows (``langgraph``), called with the explicit
#: tags of the ``tagged`` blocks in effect; each returns them unchanged outside its framework.
_SOURCES: list[Callable[[Tags], Tags]] = []


def add_source(source: Callable[[Tags], Tags]) -> None:
    """Consult ``source`` in every :func:`current_tags` from now on (once, however often added).
    A source may fill empty fields only: what a ``tagged`` block set wins."""
    if source not in _SOURCES:
        _SOURCES.append(source)


def current_tags() -> Tags:
    """The tags in effect here: the ``tagged`` blocks' (empty outside every block), with what
    a source (``add_source``) knows in the fields they leave empty."""
    tags = _TAGS.get()
    for source in _SOURCES:
        tags = source(tags)
    return tags


@contextmanager
def tagged(*, workflow_type: str | None = None, workflow_id: str | None = None,
           agent_id: str | None = None, stage: str | None = None) -> Iterator[Tags]:
    """Tag every gateway request made in this block (and in tasks started in it); yields the
    block's tags. Fields left ``None`` keep the enclosing block's value; ``""`` clears one."""
    tags = _TAGS.get().merged(workflow_type=workflow_type, workflow_id=workflow_id,
                              agent_id=agent_id, stage=stage)
    token = _TAGS.set(tags)
    try:
        yield tags
    finally:
        _TAGS.reset(token)


__all__ = ["HEADERS", "MAX_TAG_CHARS", "NO_TAGS", "Tags", "add_source", "current_tags", "tagged"]
