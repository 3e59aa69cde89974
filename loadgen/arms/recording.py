"""What the arms harness records beyond ``Trace``: each call's exact request name, offered list
and the user's wait before it (the oracle bound needs them), and the whole-request cache arm.

``RecordingTrace`` subclasses the workloads' ``Trace`` so workloads run unchanged; its ``calls``
line up one-to-one with ``Trace.stages``. ``WholeRequestCacheClient`` stands in front of the
gateway client as an exact cache keyed on the entire rendered request (model, full prompt,
sampling): the GPTCache-style baseline of dynbranch §2 that hits only on identical requests.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from loadgen.workloads.base import Trace
from services.gateway import Window

#: ``StageRecord.source`` of a call answered by the whole-request cache.
CACHE_SOURCE = "whole_request_cache"


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One stage call as the oracle bound reads it."""

    stage: str
    candidate: str
    offered: tuple[str, ...]
    #: Digest of the exact rendered request (stage, version, model, prompt, sampling).
    name: str
    latency_s: float
    #: Simulated seconds the user waited just before this call (HCI think time).
    wait_s: float = 0.0
    post_click: bool = False
    #: This call decides a branch whose fills wait for its text (``window: user``, HCI): the
    #: resolution window is the user's think time after it, not its own decode.
    user_window: bool = False
    #: The rendered prompt (what a real engine's divergence is probed against).
    prompt: str = ""
    #: When the call was made, in simulated seconds on the run's clock (only differences
    #: between calls of one run mean anything): the oracle bound orders calls in time by it.
    start_s: float = 0.0


def request_name(client: Any, template: str, stage: str, *, inputs: Mapping[str, str],
                 outputs: Mapping[str, str] | None, candidate: str | None,
                 max_tokens: int | None = None) -> str:
    """Digest of the rendered request: equal digests, identical requests."""
    return _rendered(client, template, stage, inputs=inputs, outputs=outputs,
                     candidate=candidate, max_tokens=max_tokens)[0]


def _rendered(client: Any, template: str, stage: str, *, inputs: Mapping[str, str],
              outputs: Mapping[str, str] | None, candidate: str | None,
              max_tokens: int | None) -> tuple[str, str]:
    """(digest, prompt) of the rendered request (``max_tokens``: the call's cap, if any)."""
    rendered = client.render(template, stage, inputs=inputs, outputs=outputs,
                             candidate=candidate, max_tokens=max_tokens)
    key = (f"{template}|{stage}|{rendered.stage_version}|{rendered.model}|"
           f"{rendered.sampling!r}|{rendered.text}")
    return hashlib.sha256(key.encode()).hexdigest()[:24], rendered.text


@dataclass(slots=True)
class RecordingTrace(Trace):
    """A ``Trace`` that also keeps a ``CallRecord`` per call."""

    calls: list[CallRecord] = field(default_factory=list)
    _waited_s: float = 0.0

    async def call(self, stage: str, *, inputs: Mapping[str, str],
                   outputs: Mapping[str, str] | None = None, candidate: str | None = None,
                   offered: Sequence[str] = (), observation: str = "",
                   post_click: bool = False) -> str:
        """Record the request's name, then call it as ``Trace.call`` does."""
        name, prompt = _rendered(self.client, self.template, stage, inputs=inputs,
                                 outputs=outputs, candidate=candidate,
                                 max_tokens=self.max_tokens.get(stage))
        start = self.clock.to_sim(self.clock.wall())
        text = await Trace.call(self, stage, inputs=inputs, outputs=outputs, candidate=candidate,
                                offered=offered, observation=observation, post_click=post_click)
        record = self.stages[-1]
        self.calls.append(CallRecord(stage, candidate or "", tuple(offered), name,
                                     record.latency_s, self._waited_s, post_click,
                                     self._user_window(stage), prompt, start))
        self._waited_s = 0.0
        return text

    def _user_window(self, stage: str) -> bool:
        templates = getattr(self.client, "templates", None)
        if templates is None:
            return False
        return any(p.stage == stage and p.window is Window.USER
                   for p in templates.get(self.template).decisions)

    async def user_wait(self, sim_s: float) -> None:
        """Wait as ``Trace.user_wait`` does and remember it for the next call."""
        await Trace.user_wait(self, sim_s)
        self._waited_s += sim_s


@dataclass(frozen=True, slots=True)
class CachedReply:
    """The part of a ``CallResponse`` that ``Trace.call`` reads."""

    text: str
    source: str = CACHE_SOURCE


class WholeRequestCacheClient:
    """Exact whole-request cache in front of a gateway client; everything else is delegated."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.answers: dict[str, str] = {}
        self.hits = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def call_stage(self, template_id: str, stage_id: str, **kwargs: Any) -> Any:
        """The stored answer of an identical earlier request, else the gateway's."""
        key = request_name(self._client, template_id, stage_id, inputs=kwargs["inputs"],
                           outputs=kwargs.get("outputs"), candidate=kwargs.get("candidate"),
                           max_tokens=kwargs.get("max_tokens"))
        if key in self.answers:
            self.hits += 1
            return CachedReply(self.answers[key])
        reply = await self._client.call_stage(template_id, stage_id, **kwargs)
        self.answers[key] = reply.text
        return reply


__all__ = ["CACHE_SOURCE", "CachedReply", "CallRecord", "RecordingTrace",
           "WholeRequestCacheClient", "request_name"]
