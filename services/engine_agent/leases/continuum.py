"""Continuum's KV-cache time-to-live (Li et al. 2026, arXiv:2511.02230), as pure functions.

Continuum pins a finished call's KV cache while its program's tool runs, for a time-to-live τ,
and schedules programs first-come-first-served. What we follow, and where from:

* **Mechanism** — the public code, ``Hanchenli/vllm-continuum`` (read at commit ``3761e573``
  through its fork ``Whrlicht/vllm-continuum``; the upstream repository was not reachable here):
  the pin starts when a call finishes (``Scheduler._free_blocks`` in
  ``vllm/v1/core/sched/scheduler.py``); its deadline is postponed while the program's next
  request waits in the queue and it ends when that request is admitted
  (``Scheduler.unpin_requests_regular``); under memory pressure, with at most one request
  running, the pin with the latest deadline is released
  (``Scheduler.pop_running_request_based_on_last_step``); the queue puts requests of pinned
  programs first, then orders programs by their first arrival
  (``ContinuumRequestQueue.peek_request`` in ``vllm/v1/core/sched/request_queue.py``). A tool
  duration sample is the time from a call's finish to the program's next request reaching the
  engine (``ToolCallEstimator.request_arrives`` / ``update_func_call_exec_time`` in
  ``vllm/v1/core/estimate_with_func.py``), so it includes everything between — here the
  delivery link too.
* **The TTL** — the paper (v2/v4 abstracts: τ "determined by the reload cost and potential
  queueing delay induced by eviction", chosen for "the internal variance of tool call
  durations") computes an optimal τ* from a cost–benefit model over the tool's duration
  distribution. The published code does not: ``ToolCallEstimator.set_up_pin`` pins for a fixed
  2 s (``FIXED_THRESHOLD_CONTINUUM``) when the tool's mean duration is at most 2 s. The paper's
  method section was not available to us, so ``optimal_ttl`` below is our reading of the
  model its abstract describes, and we say so wherever we report it:

      U(τ) = F̂(τ)·(R + Q) − c·E[min(G, τ)]
      τ*   = argmax U(τ) over τ ∈ {0} ∪ {observed gaps ≤ max}; no pin when U(τ*) ≤ 0

  with F̂ the empirical distribution of the tool's recent gaps G, R the measured reload cost of
  the prefix (its recompute time: κ per 512 tokens), Q the queueing delay an evicted
  continuation would meet (the engine-queue proxy of LADS §3.4), and c the price of holding the
  prefix's M of the pool's K blocks per second: c = (M / K)·n, the share of memory withheld
  from the n requests now sharing the engine (nothing when none does). U steps up only at
  observed gaps and falls in between, so its maximum is at one of them. Before a tool has a
  gap sample the code's cold-start rule applies: pin for ``COLD_START_TTL_S`` (2 s).
"""

from __future__ import annotations

import bisect
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass

#: ``FIXED_THRESHOLD_CONTINUUM`` of the published code: the TTL before any sample (and the
#: only TTL the code ever sets).
COLD_START_TTL_S = 2.0
#: Pins shorter than this are no pins (``length_of_pin > 0.01`` in ``Scheduler._free_blocks``).
MIN_PIN_S = 0.01
#: Gap samples kept per tool (the newest); the code keeps every sample, unbounded.
GAP_WINDOW = 256
#: Tools whose gaps are kept (the least recently used beyond this are forgotten).
MAX_TOOLS = 1024


@dataclass(frozen=True, slots=True)
class PinPrice:
    """What holding one prefix is worth and costs: R + Q seconds saved if reused while pinned,
    and c request-seconds of delay per second held."""

    benefit_s: float
    cost_per_s: float


def pin_price(*, prefix_blocks: int, block_size: int, pool_blocks: int, waiting: int,
              running: int, kappa_s: float, queue_s: float, chunk_tokens: int) -> PinPrice:
    """R + Q and c of the module docstring for a prefix of ``prefix_blocks`` blocks."""
    reload_s = kappa_s * prefix_blocks * block_size / chunk_tokens
    share = prefix_blocks / pool_blocks if pool_blocks > 0 else 1.0
    return PinPrice(reload_s + queue_s, share * max(0, waiting + running))


def optimal_ttl(gaps: Sequence[float], price: PinPrice, *, max_ttl_s: float) -> float:
    """τ* over the observed ``gaps`` longer than ``MIN_PIN_S`` (0.0: do not pin);
    ``COLD_START_TTL_S`` without samples."""
    if not gaps:
        return min(COLD_START_TTL_S, max_ttl_s)
    ordered = sorted(g for g in gaps if g >= 0)
    n = len(ordered)
    best_tau, best_u, below = 0.0, 0.0, 0.0  # U(0) = 0
    for k, tau in enumerate(ordered, start=1):
        below += tau
        if tau > max_ttl_s:
            break
        if (k < n and ordered[k] == tau) or tau <= MIN_PIN_S:
            continue  # a repeated gap once, with every copy counted; a pin this short is none
        held = (below + (n - k) * tau) / n  # E[min(G, τ)]
        u = k / n * price.benefit_s - price.cost_per_s * held
        if u > best_u:
            best_tau, best_u = tau, u
    return best_tau


def hit_probability(gaps: Sequence[float], tau: float) -> float:
    """F̂(τ): the share of observed gaps at most ``tau`` (diagnostics)."""
    if not gaps:
        return 0.0
    ordered = sorted(gaps)
    return bisect.bisect_right(ordered, tau) / len(ordered)


class GapBook:
    """Per-tool gaps from a call's finish to its program's next request reaching the engine."""

    def __init__(self, window: int = GAP_WINDOW, max_tools: int = MAX_TOOLS,
                 max_open: int = 65_536) -> None:
        self.window, self.max_tools, self.max_open = window, max_tools, max_open
        self._gaps: OrderedDict[str, deque[float]] = OrderedDict()
        self._open: OrderedDict[object, tuple[str, float]] = OrderedDict()

    def finished(self, key: object, tool: str, at: float) -> None:
        """A call finished and ``tool`` began for the program's next turn ``key``."""
        self._open[key] = (tool, at)
        while len(self._open) > self.max_open:
            self._open.popitem(last=False)

    def arrived(self, key: object, at: float) -> float | None:
        """The program's next request reached the engine: fold the gap; the gap (None if the
        finish was not seen)."""
        opened = self._open.pop(key, None)
        if opened is None:
            return None
        tool, began = opened
        gap = max(0.0, at - began)
        samples = self._gaps.pop(tool, None) or deque(maxlen=self.window)
        samples.append(gap)
        self._gaps[tool] = samples  # most recently used last
        while len(self._gaps) > self.max_tools:
            self._gaps.popitem(last=False)
        return gap

    def gaps(self, tool: str) -> tuple[float, ...]:
        """The tool's recent gaps, oldest first."""
        return tuple(self._gaps.get(tool, ()))

    def forget(self, key: object) -> None:
        """Drop an open call that will not arrive here."""
        self._open.pop(key, None)


__all__ = ["COLD_START_TTL_S", "GAP_WINDOW", "MIN_PIN_S", "GapBook", "PinPrice",
           "hit_probability", "optimal_ttl", "pin_price"]
