"""The mixed workload of ``dynbranch bench faults``, and the user-agent harness that drives it.

Items are numbered; item ``k`` is a Routing workflow (router → handler → executor, the choice
taken from the script as in ``loadgen.demo``, every query distinct so exact reuse cannot stand in
for a generation), every fourth a plain canonical call (an untagged prompt), and every eighth
(``k % 8 == 5``) a tool round: a history call in a workflow, then its tool result returned
through the gateway's ``DeliverResult`` to the delivery service (LADS), which gets the
continuation from the engine holding the history. The harness acts
as an agent behind a load balancer would: it spreads items over the gateway replicas, retries a
failed stage call a bounded number of times with backoff, each retry on the next replica, and
counts the retries and every failed attempt's status. An item is *lost* when a stage still fails
after the last attempt.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc

from loadgen.demo import FUNCTIONS, REQUESTS
from services.common.pb import common_pb2, delivery_pb2, gateway_pb2
from services.gateway import DynbranchClient

MODEL = "qwen3-32b"
PLAIN_EVERY = 4
TOOL_EVERY, TOOL_AT = 8, 5
TOOL_HISTORY = "You are a shopping agent. Inspect the product and its reviews carefully. " * 4
PLAIN_MAX_TOKENS = 160
#: Statuses a harness retries (transient: the service may answer the next attempt).
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                       grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ABORTED,
                       grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN})
Call = Callable[[DynbranchClient], Awaitable[gateway_pb2.CallResponse]]
Deliver = Callable[[DynbranchClient], Awaitable[delivery_pb2.DeliverResponse]]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded retries with exponential backoff, as an agent harness would declare them."""

    attempts: int = 5
    backoff_s: float = 0.2
    max_backoff_s: float = 1.6
    call_timeout_s: float = 20.0

    def wait_s(self, attempt: int) -> float:
        """Backoff before attempt ``attempt + 1`` (``attempt`` counts from 0)."""
        return min(self.backoff_s * 2 ** attempt, self.max_backoff_s)


@dataclass(slots=True)
class ItemOutcome:
    """What one item returned, and when (``time.monotonic`` seconds)."""

    key: int
    kind: str
    start: float
    end: float = 0.0
    #: The texts of its stage calls, in order; None when the item was lost.
    texts: tuple[str, ...] | None = None
    retries: int = 0
    #: Status name of every failed attempt, retried or final.
    errors: Counter[str] = field(default_factory=Counter)
    last_error: str = ""

    @property
    def ok(self) -> bool:
        """Whether the item completed (after retries or not)."""
        return self.texts is not None

    @property
    def latency_s(self) -> float:
        """Wall seconds from the first call to the last answer (retries and backoff included)."""
        return self.end - self.start


def kind_of(key: int) -> str:
    """``plain`` for every fourth item, ``tool`` for every eighth, ``routing`` otherwise."""
    if key % PLAIN_EVERY == PLAIN_EVERY - 1:
        return "plain"
    return "tool" if key % TOOL_EVERY == TOOL_AT else "routing"


class Harness:
    """Runs items against gateway replicas; owns one SDK client per replica."""

    def __init__(self, targets: list[str], policy: RetryPolicy) -> None:
        self.clients = [DynbranchClient(t, timeout_s=policy.call_timeout_s) for t in targets]
        for client in self.clients:
            client.use_builtin("routing")
        self.policy = policy

    async def run_item(self, key: int) -> ItemOutcome:
        """Run item ``key`` to its end; never raises for a failed call (the item is lost)."""
        out = ItemOutcome(key, kind_of(key), time.monotonic())
        try:
            if out.kind == "plain":
                out.texts = (await self._call(out, self._plain(key)),)
            elif out.kind == "tool":
                out.texts = await self._tool(out)
            else:
                out.texts = await self._routing(out)
        except grpc.aio.AioRpcError as err:
            out.last_error = f"{err.code().name}: {err.details()}"
        out.end = time.monotonic()
        return out

    @staticmethod
    def _plain(key: int) -> Call:
        query = REQUESTS[key % len(REQUESTS)][0]
        prompt = f"Summarize support ticket {key} for the on-call engineer: {query}"
        return lambda c: c.call(prompt, MODEL, max_tokens=PLAIN_MAX_TOKENS)

    async def _routing(self, out: ItemOutcome) -> tuple[str, ...]:
        query, choice = REQUESTS[out.key % len(REQUESTS)]
        inputs = {"functions": json.dumps([{"name": f} for f in FUNCTIONS]),
                  "query": f"{query} (fault case {out.key})"}
        wf, outputs, texts = f"fault-{out.key}", {}, []
        for stage in ("router", "handler", "executor"):
            extra = ({"offered": FUNCTIONS} if stage == "router" else {"candidate": choice})
            text = await self._call(out, lambda c, s=stage, o=dict(outputs), x=extra:
                                    c.call_stage("routing", s, workflow_id=wf, inputs=inputs,
                                                 outputs=o, **x))
            texts.append(text)
            if stage == "handler":
                outputs["handler"] = text
        return tuple(texts)

    async def _tool(self, out: ItemOutcome) -> tuple[str, ...]:
        wf, history = f"fault-tool-{out.key}", f"{TOOL_HISTORY} Session {out.key}."
        sampling = common_pb2.SamplingParams(max_tokens=16, ignore_eos=True)
        demand = common_pb2.StageDemand(model=MODEL, prompt=history, sampling=sampling,
                                        workflow_id=wf)
        first = await self._call(out, lambda c: c.stub.Call(
            gateway_pb2.CallRequest(demand=demand), timeout=self.policy.call_timeout_s))
        history += first
        observation = f"Product {out.key}: Fusion Backpack, $59. Reviews: 4.6/5."
        request = delivery_pb2.DeliverRequest(
            key=common_pb2.ResultKey(workflow_id=wf, turn=1), history=history,
            observation=observation.encode(), tool="open", model=MODEL,
            prompt=f"{history}\nObservation: {observation}\n", sampling=sampling)
        delivered = await self._call(out, lambda c: c.stub.DeliverResult(
            request, timeout=self.policy.call_timeout_s), text=lambda r: r.finished.text)
        return first, delivered

    async def _call(self, out: ItemOutcome, call: Call | Deliver,
                    text: Callable[[Any], str] = lambda r: r.text) -> str:
        """One call with bounded retries, each attempt on the next replica."""
        for attempt in range(self.policy.attempts):
            client = self.clients[(out.key + attempt) % len(self.clients)]
            try:
                return text(await call(client))
            except grpc.aio.AioRpcError as err:
                out.errors[err.code().name] += 1
                if err.code() not in RETRYABLE or attempt + 1 == self.policy.attempts:
                    raise
                out.retries += 1
                await asyncio.sleep(self.policy.wait_s(attempt))
        raise AssertionError("unreachable")

    async def close(self) -> None:
        """Close every client; idempotent."""
        for client in self.clients:
            await client.close()


async def drive(harness: Harness, keys: Iterator[int], concurrency: int,
                stop: asyncio.Event | None = None) -> list[ItemOutcome]:
    """Closed loop: ``concurrency`` workers take the next key until ``keys`` runs out or
    ``stop`` is set; items already started run to their end."""
    outcomes: list[ItemOutcome] = []

    async def worker() -> None:
        while stop is None or not stop.is_set():
            key = next(keys, None)
            if key is None:
                return
            outcomes.append(await harness.run_item(key))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return outcomes


__all__ = ["Harness", "ItemOutcome", "RETRYABLE", "RetryPolicy", "drive", "kind_of"]
