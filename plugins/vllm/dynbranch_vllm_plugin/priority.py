"""Moving a live request between priorities: what lets dynbranch raise a speculative fill to
canonical priority once a canonical demand adopts it, and lower it back when the adopter leaves.

vLLM (0.32) reads a request's ``priority`` only under its priority scheduling policy, in two
places: the waiting queues (``Scheduler.waiting`` and ``.kv_holding_waiting``, both
``PriorityRequestQueue`` heaps ordered by ``(priority, arrival_time)``) and preemption (the
running request of largest ``(priority, arrival_time)`` goes first). A queued request is taken
out of its heap, changed and pushed back (changing it in place would break the heap's order); a
running one is changed in place. vLLM itself has no call for this; its arrival time is kept, so
the request keeps its place among requests of its new priority.

``engine_core`` registers ``dynbranch_set_priority`` with the other utilities; like them it runs
on the engine core's busy-loop thread between steps, and never raises into the engine core.
"""

from __future__ import annotations

import logging
from typing import Any

from dynbranch_vllm_plugin.leases import engine_request_id

#: Under ``vllm.``: vLLM configures only its own logger (package ``__init__``).
logger = logging.getLogger(f"vllm.{__name__}")

#: The scheduler's waiting queues, in the order it drains them.
_WAITING_QUEUES = ("kv_holding_waiting", "waiting")


def dynbranch_set_priority(self: Any, request_id: str, priority: int) -> bool:
    """Move the client's request ``request_id`` (``request_ids``) to vLLM priority ``priority``
    (lower goes first); False when the engine does not have it, it finished, or the engine
    schedules first come, first served (where priorities mean nothing)."""
    try:
        scheduler = self.scheduler
        engine_id = engine_request_id(self, request_id)
        if engine_id is None or not priority_policy(scheduler):
            return False
        return _move(scheduler, scheduler.requests[engine_id], int(priority))
    except Exception:  # an exception must not reach the engine core's loop
        logger.exception("dynbranch_set_priority(%r, %r) failed", request_id, priority)
        return False


def priority_policy(scheduler: Any) -> bool:
    """Whether the scheduler runs vLLM's priority policy (``SchedulingPolicy.PRIORITY``, told by
    its value so that no vLLM import is needed)."""
    policy = getattr(scheduler, "policy", None)
    return str(getattr(policy, "value", policy)).lower() == "priority"


def _move(scheduler: Any, request: Any, priority: int) -> bool:
    """Give ``request`` its new priority where the scheduler will see it (module docstring)."""
    if request.is_finished():
        return False
    queue = _dequeue(scheduler, request)
    old, request.priority = request.priority, priority
    if queue is not None:
        queue.add_request(request)  # back into the heap under its new key
    logger.debug("request %s: priority %s -> %s (%s)", request.request_id, old, priority,
                 "queued" if queue is not None else "running")
    return True


def _dequeue(scheduler: Any, request: Any) -> Any:
    """Take ``request`` out of the waiting queue that holds it; that queue (None: neither does,
    it runs)."""
    for name in _WAITING_QUEUES:
        queue = getattr(scheduler, name, None)
        if queue is None:
            continue
        try:
            queue.remove_request(request)  # ValueError when not in this queue
        except ValueError:
            continue
        return queue
    return None


__all__ = ["dynbranch_set_priority", "priority_policy"]
