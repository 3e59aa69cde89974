"""The two LADS workloads as frozen data, and the cohort tool service (LADS §5.1).

- ``cohort_workload``: the controlled Web-agent realization. N = 16 workflows of six calls (one
  cold call, five continuations after a tool result), histories of 8,192 / 12,288 / 20,480 /
  22,528 sim tokens built from inert archived tool text (mini-SWE-agent's bash observations),
  two tool cohorts of C = 8.
- ``web_burst_workload``: Web-derived burst replay. The same shape with one cohort of 16;
  observations are Luma product and review pages for 16 WebArena shopping tasks (``lads_web``).

Nothing here runs an engine: a harness replays the values. Token counts are in the sim's toy
tokenizer (``services.engine_agent.sim.tokenizer``). Data is read from ``../shared/data`` at run
time.

Seed choices (ours; the paper only says seeds vary arrivals and history assignment): arrivals
are uniform in [0, 0.5] s (a burst); the four history lengths are dealt equally and shuffled.
The controlled workload also draws its archived text and observation sizes (300–3,000 bytes)
per seed; the Web workload's observations depend only on the task, never on the seed.
"""

from __future__ import annotations

import bisect
import functools
import random
import string
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from loadgen.workloads import lads_web
from loadgen.workloads.base import data_path, read_jsonl
from services.engine_agent import pieces, text_key

HISTORY_LENGTHS = (8192, 12288, 20480, 22528)
TOOL_SERVICE_S = 0.05
TOOL_LIMIT_S = 60.0
OUTPUT_TOKENS = 64
CONTEXT_LIMIT = 32768
#: 32 kbit/s return link, in bytes per second.
LINK_BYTES_PER_S = 32_000 / 8
ARRIVAL_JITTER_S = 0.5
OBSERVATION_BYTES = (300, 3000)
#: Tokens reserved per continuation for the chat template's turn framing.
FRAMING_TOKENS = 32
SWE_FILE = "swe_agent_trajectories/mini_swe_agent_gemini-3-pro_swebench_verified_sample23.jsonl"
#: The shared data set files both LADS workloads read (checked before ``bench lads`` starts).
DATA_FILES = (SWE_FILE, lads_web.TASKS_FILE, lads_web.PRODUCTS_FILE, lads_web.REVIEWS_FILE)


@dataclass(frozen=True, slots=True)
class LadsCall:
    """One model call of a workflow and the tool result that precedes it."""

    #: 0 = the cold initial call; 1.. = continuations after a tool result.
    turn: int
    #: Tool whose result precedes this call ("" for turn 0).
    tool: str
    #: The tool result text (payload) that precedes this call ("" for turn 0).
    observation: str
    #: Delay from the previous call's end to the tool's start (0: it starts at once).
    tool_start_delay_s: float
    #: Sim tokens of ``observation``.
    observation_tokens: int = 0

    @property
    def payload_bytes(self) -> int:
        """UTF-8 bytes of the observation (what crosses the return link, before framing)."""
        return len(self.observation.encode())


@dataclass(frozen=True, slots=True)
class LadsWorkflow:
    """One agent workflow: its arrival, cohort, turn-0 history and calls."""

    workflow_id: str
    #: Arrival time of the workflow (its turn-0 call), seconds from the burst's start.
    arrival_s: float
    cohort: int
    #: The turn-0 prompt, exactly ``history_tokens`` sim tokens.
    history_text: str
    history_tokens: int
    calls: tuple[LadsCall, ...]

    def prompt_tokens(self, turn: int, output_tokens: int) -> int:
        """Sim tokens of call ``turn``'s prompt: history, earlier outputs and observations."""
        seen = sum(c.observation_tokens for c in self.calls[1:turn + 1])
        return self.history_tokens + turn * output_tokens + seen


@dataclass(frozen=True, slots=True)
class LadsWorkload:
    """A whole LADS input: workflows plus the serving and tool settings they run under."""

    name: str
    seed: int
    workflows: tuple[LadsWorkflow, ...]
    cohort_size: int
    tool_service_s: float
    tool_limit_s: float
    output_tokens: int
    context_limit: int
    link_bytes_per_s: float
    #: Data files used, relative to the data root.
    sources: tuple[str, ...]

    def cohort_members(self, cohort: int) -> tuple[str, ...]:
        """Workflow ids of one tool cohort (every round's expected members)."""
        return tuple(w.workflow_id for w in self.workflows if w.cohort == cohort)


# -- Cohort tool service ------------------------------------------------------------------------

def cohort_release_times(starts: Mapping[str, float], service_s: float = TOOL_SERVICE_S,
                         limit_s: float = TOOL_LIMIT_S) -> dict[str, float]:
    """Release time of each call of one cohort round, given every member's start (LADS §5.1).

    Our reading of "same-round calls in a cohort start before its common 50-millisecond
    service completes, with a 60-second limit permitting partial release": the round's
    service completes ``service_s`` after its last member starts and releases every result
    then, but no result waits longer than ``limit_s`` after its own start. A call whose
    mates are still missing ``limit_s`` after it started is released alone at
    ``start + limit_s`` (partial release); the stragglers then complete among themselves.
    """
    last = max(starts.values(), default=0.0)
    return {m: min(last + service_s, t + limit_s) for m, t in starts.items()}


def release_time(starts: Mapping[str, float], expected: Collection[str], member: str, *,
                 service_s: float = TOOL_SERVICE_S, limit_s: float = TOOL_LIMIT_S,
                 now: float | None = None) -> float | None:
    """``member``'s release time if ``starts`` so far determine it, else None.

    With every expected member started it is ``cohort_release_times``'s answer. Otherwise a
    missing mate can start no earlier than ``now``, so once ``now + service_s`` reaches the
    member's limit the answer is that limit; before then (or without ``now``) it is None, and
    the harness waits for the next start or until ``limit_time``, then asks again.
    """
    if member not in starts:
        raise ValueError(f"member {member!r} has not started in this round")
    cap = starts[member] + limit_s
    if all(m in starts for m in expected):
        return min(max(starts[m] for m in expected) + service_s, cap)
    if now is not None and now + service_s >= cap:
        return cap
    return None


def limit_time(starts: Mapping[str, float], member: str,
               limit_s: float = TOOL_LIMIT_S) -> float:
    """The latest time ``member``'s result can be held: its start plus the limit."""
    return starts[member] + limit_s


# -- The two workloads --------------------------------------------------------------------------

def cohort_workload(seed: int, *, n: int = 16, cohort_size: int = 8, calls: int = 6,
                    data_root: str | Path | None = None) -> LadsWorkload:
    """The controlled cohort workload: archived bash output as histories and observations."""
    rng = random.Random(f"lads-cohort-{seed}")
    archive, by_size = _archive(_root(data_root)), _archive_by_size(_root(data_root))
    lengths = _lengths(n, rng)
    cap = _observation_cap(calls)
    workflows = []
    for i in range(n):
        workflow_id = f"cohort-s{seed}-w{i:02d}"
        head = f"{_tag(workflow_id)} archived tool log of workflow {workflow_id}\n"
        filler = _cycle(archive, rng.randrange(len(archive)))
        history = _fit(head, (lads_web.cap_bytes(text) for text in filler), lengths[i])
        observations = [("bash", _archived_observation(by_size, rng)) for _ in range(calls - 1)]
        workflows.append(_workflow(workflow_id, _arrival(rng), i // cohort_size, history,
                                   lengths[i], observations, cap))
    return _workload("cohort", seed, workflows, cohort_size, (SWE_FILE,))


def web_burst_workload(seed: int, *, n: int = 16, calls: int = 6,
                       data_root: str | Path | None = None) -> LadsWorkload:
    """Web-derived burst replay: one cohort of ``n`` shopping tasks over the Luma catalogue."""
    rng = random.Random(f"lads-web_burst-{seed}")
    lengths = _lengths(n, rng)
    cap = _observation_cap(calls)
    workflows = []
    for i, task in enumerate(lads_web.shopping_tasks(n, data_root)):
        workflow_id = f"web_burst-s{seed}-w{i:02d}"
        head = f"{task.intent}\n[{_tag(workflow_id)}] earlier browsing of workflow {workflow_id}\n"
        pages = lads_web.catalog_pages(task.task_id, data_root)
        history = _fit(head, pages, lengths[i])
        workflows.append(_workflow(workflow_id, _arrival(rng), 0, history, lengths[i],
                                   _web_observations(task, calls - 1, data_root), cap))
    return _workload("web_burst", seed, workflows, n, lads_web.sources())


def _web_observations(task: lads_web.ShoppingTask, count: int,
                      data_root: str | Path | None) -> list[tuple[str, str]]:
    # Turn 1 opens product 1, turn 2 reads its reviews, turn 3 opens product 2, ...
    products, _ = lads_web.pick_products(task.intent, task.task_id, (count + 1) // 2, data_root)
    observations = []
    for k in range(count):
        product = products[k // 2]
        if k % 2 == 0:
            observations.append(("open", lads_web.render_open(product)))
        else:
            observations.append(("read_reviews", lads_web.render_reviews(product, data_root)))
    return observations


def _workload(name: str, seed: int, workflows: list[LadsWorkflow], cohort_size: int,
              sources: tuple[str, ...]) -> LadsWorkload:
    workload = LadsWorkload(name, seed, tuple(workflows), cohort_size, TOOL_SERVICE_S,
                            TOOL_LIMIT_S, OUTPUT_TOKENS, CONTEXT_LIMIT, LINK_BYTES_PER_S, sources)
    budget = CONTEXT_LIMIT - OUTPUT_TOKENS
    for w in workload.workflows:
        if w.prompt_tokens(len(w.calls) - 1, OUTPUT_TOKENS) > budget:
            raise ValueError(f"{w.workflow_id}: last prompt exceeds {budget} tokens")
    return workload


def _workflow(workflow_id: str, arrival_s: float, cohort: int, history: str, tokens: int,
              observations: list[tuple[str, str]], cap: int) -> LadsWorkflow:
    calls = [LadsCall(0, "", "", 0.0, 0)]
    for turn, (tool, text) in enumerate(observations, start=1):
        found = pieces(text)[:cap]
        calls.append(LadsCall(turn, tool, "".join(found), 0.0, len(found)))
    return LadsWorkflow(workflow_id, arrival_s, cohort, history, tokens, tuple(calls))


# -- Seeded draws and sizing --------------------------------------------------------------------

def _lengths(n: int, rng: random.Random) -> list[int]:
    # Each length dealt equally often (within one when n is not a multiple of four).
    lengths = [HISTORY_LENGTHS[i % len(HISTORY_LENGTHS)] for i in range(n)]
    rng.shuffle(lengths)
    return lengths


def _arrival(rng: random.Random) -> float:
    return round(rng.uniform(0.0, ARRIVAL_JITTER_S), 6)


def _observation_cap(calls: int) -> int:
    # Sim tokens one observation may hold so the longest history's last prompt still fits.
    room = CONTEXT_LIMIT - OUTPUT_TOKENS - max(HISTORY_LENGTHS)
    return room // max(calls - 1, 1) - OUTPUT_TOKENS - FRAMING_TOKENS


def _archived_observation(by_size: tuple[tuple[int, ...], tuple[str, ...]],
                          rng: random.Random) -> str:
    # A size in the range, then an archived output at least that long, cut to the size.
    sizes, texts = by_size
    size = rng.randint(*OBSERVATION_BYTES)
    return lads_web.cap_bytes(texts[rng.randrange(bisect.bisect_left(sizes, size), len(texts))],
                              size)


def _fit(head: str, filler: Iterator[str], tokens: int) -> str:
    """``head`` then filler chunks, one per line, cut to exactly ``tokens`` sim tokens.

    Chunks are stripped and joined by a newline, and a newline between two non-space
    characters is a piece of its own, so the pieces of the joined text are the chunks'
    pieces (cached) with a newline between: no need to tokenize the whole history again.
    """
    found = list(_pieces(head.strip()))
    while len(found) < tokens:
        chunk = next(filler).strip()
        if chunk:
            found += ("\n", *_pieces(chunk))
    return "".join(found[:tokens])


@functools.lru_cache(maxsize=4096)
def _pieces(text: str) -> tuple[str, ...]:
    return tuple(pieces(text))


def _cycle(items: tuple[str, ...], start: int) -> Iterator[str]:
    index = start
    while True:
        yield items[index % len(items)]
        index += 1


def _tag(workflow_id: str) -> str:
    """Eight letters unique to a workflow: its history's first token, so no block is shared."""
    key = text_key("lads", workflow_id)
    letters = []
    for _ in range(8):
        key, digit = divmod(key, 26)
        letters.append(string.ascii_lowercase[digit])
    return "".join(letters)


def _root(data_root: str | Path | None) -> str:
    return str(data_path(data_root, ".").resolve())


@functools.lru_cache(maxsize=4)
def _archive(root: str) -> tuple[str, ...]:
    """Every tool observation of the archived mini-SWE-agent runs, in file order."""
    texts = []
    for record in read_jsonl(data_path(root, SWE_FILE)):
        # messages: system, task, then assistant action / user observation pairs.
        texts += [m["content"] for m in record["messages"][2:] if m["role"] == "user"]
    return tuple(texts)


@functools.lru_cache(maxsize=4)
def _archive_by_size(root: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The archive's observations sorted by UTF-8 size, with the sizes (for bisection)."""
    ordered = sorted(_archive(root), key=lambda text: len(text.encode()))
    return tuple(len(text.encode()) for text in ordered), tuple(ordered)


__all__ = [
    "CONTEXT_LIMIT", "DATA_FILES", "HISTORY_LENGTHS", "LINK_BYTES_PER_S", "OUTPUT_TOKENS",
    "TOOL_LIMIT_S", "TOOL_SERVICE_S", "LadsCall", "LadsWorkflow", "LadsWorkload",
    "cohort_release_times", "cohort_workload", "limit_time", "release_time", "web_burst_workload",
]
