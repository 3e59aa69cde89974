"""Small factories for the simulated engine's tests."""

from __future__ import annotations

import string
from typing import Any

from services.common.values.generation import GenerationRequest, Priority, Sampling
from services.engine_agent.backend import Finished, GenerationEvent
from services.engine_agent.backends.sim import SimBackend
from services.engine_agent.sim.cost_model import CostPreset, get_preset
from services.engine_agent.sim.engine import SimEngine
from services.engine_agent.sim.tokenizer import encode

MODEL = "sim-test"


def small_preset(base: str = "zero", **changes: Any) -> CostPreset:
    """A small engine: 64 blocks of 16, 1,024-token context, 4 slots, 256-token budget."""
    limits = dict(num_kv_blocks=64, max_model_len=1024, max_running=4, max_batched_tokens=256)
    return get_preset(base).with_overrides(**{**limits, **changes})


def make_request(request_id: str = "r1", prompt: str = "hello world", *, max_tokens: int = 8,
                 priority: Priority = Priority.CANONICAL, model: str = MODEL,
                 **sampling: Any) -> GenerationRequest:
    """A valid request unless overridden; extra keywords go to ``Sampling``."""
    return GenerationRequest(request_id=request_id, model=model, prompt=prompt,
                             sampling=Sampling(max_tokens=max_tokens, **sampling),
                             priority=priority)


def make_engine(preset: CostPreset | None = None, **kw: Any) -> SimEngine:
    """A ``SimEngine`` on ``small_preset()`` serving ``MODEL``."""
    return SimEngine(preset or small_preset(), model=MODEL, **kw)


def make_backend(preset: CostPreset | str | None = None, **kw: Any) -> SimBackend:
    """A ``SimBackend`` on ``small_preset()`` serving ``MODEL``."""
    return SimBackend(preset or small_preset(), model=MODEL, **kw)


def words(n: int, salt: str = "a") -> str:
    """A prompt of exactly ``n`` tokens (distinct letter words), distinct per ``salt``."""
    salt = salt.translate(_DIGITS_TO_LETTERS)  # a digit would split a word into two tokens
    text = "".join(" " + salt + _letters(i) for i in range(n))
    assert len(encode(text)) == n, (n, salt)
    return text


_DIGITS_TO_LETTERS = str.maketrans("0123456789", "qrstuvwxyz")


def _letters(i: int) -> str:
    out = ""
    while True:
        out += string.ascii_lowercase[i % 26]
        i //= 26
        if i == 0:
            return out


async def collect(backend: SimBackend, request: GenerationRequest) -> list[GenerationEvent]:
    """Every event of one generation."""
    return [event async for event in backend.generate(request)]


async def finish(backend: SimBackend, request: GenerationRequest) -> Finished:
    """The Finished event of one generation."""
    events = await collect(backend, request)
    last = events[-1]
    assert isinstance(last, Finished)
    return last


def assert_idle(engine: SimEngine) -> None:
    """No request holds anything: every reference count is zero and free + used == total."""
    pool = engine.pool
    pool.check()
    assert [b.block_id for b in pool.blocks if b.ref_cnt] == []
    assert pool.num_used == 0 and pool.num_free == pool.num_blocks
    assert not engine.scheduler.running and engine.scheduler.num_waiting == 0
