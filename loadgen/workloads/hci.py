"""HCI offered actions over Schema-Guided Dialogue (dynbranch §2.1, §5.1; template ``hci``).

A workflow is one SGD dialogue's first offer turns. Per turn: the assistant's ``offer`` stage
shows a menu (the SYSTEM frame's ``service_results`` labelled by the OFFER act's slot, the offered
option first) and opens an independent branch over it; the user thinks for a sampled time
(lognormal, median 2.7 simulated seconds: the paper's human-wait window, Fig. 1), then the picked
option's ``fulfil`` stage runs. The pick is read from the dialogue's next USER turn when it can be
(SELECT, an INFORM of the slot naming a menu entry, REQUEST_ALTS followed by the next OFFER),
else it is the offered option. The reported latency is the user turn after the click (§5.1).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadgen.workloads.base import Trace, Workload, data_path, read_jsonl, sample

SGD_FILE = "sgd/test_dialogues_subset.jsonl"
#: Median and log-spread of the user's think time, simulated seconds (dynbranch Fig. 1: ≈ 2.7 s).
THINK_MEDIAN_S, THINK_SIGMA = 2.7, 0.5
THINK_RANGE_S = (0.5, 10.0)


@dataclass(frozen=True, slots=True)
class HciTurn:
    """One offer → pick turn."""

    dialogue: str
    options: str
    offered: tuple[str, ...]
    pick: str
    why: str
    think_s: float = 0.0


@dataclass(frozen=True, slots=True)
class HciInstance:
    """One dialogue's offer turns."""

    key: str
    service: str
    turns: tuple[HciTurn, ...]


def _acts(turn: dict[str, Any], service: str) -> list[dict[str, Any]]:
    frames = [f for f in turn["frames"] if f["service"] == service] or turn["frames"]
    return [a for f in frames for a in f["actions"]]


def _next_offer(turns: list[dict[str, Any]], i: int, service: str, slot: str) -> str:
    if i + 2 < len(turns):
        for act in _acts(turns[i + 2], service):
            if act["act"] == "OFFER" and act["slot"] == slot and act["values"]:
                return act["values"][0]
    return ""


def derive_pick(turns: list[dict[str, Any]], i: int, service: str, slot: str,
                menu: tuple[str, ...]) -> tuple[str, str]:
    """The option the user picked after SYSTEM turn ``i``, and how it was derived."""
    if i + 1 >= len(turns):
        return menu[0], "default"
    acts = _acts(turns[i + 1], service)
    for act in acts:
        if act["act"] == "SELECT":
            named = [v for v in act["values"] if v in menu]
            return (named[0], "select") if named else (menu[0], "select")
    for act in acts:
        if act["act"] == "INFORM" and act["slot"] == slot:
            named = [v for v in act["values"] if v in menu]
            if named:
                return named[0], "inform"
    if any(act["act"] == "REQUEST_ALTS" for act in acts):
        alternative = _next_offer(turns, i, service, slot)
        if alternative in menu:
            return alternative, "alternative"
    return menu[0], "default"


def _menu(slot: str, offered: str, rows: list[dict[str, str]], limit: int) -> tuple[str, ...]:
    values = [offered, *(row.get(slot, "") for row in rows)]
    return tuple(v for v in dict.fromkeys(values) if v)[:limit]


def _options(menu: tuple[str, ...], slot: str, details: list[str],
             rows: list[dict[str, str]]) -> str:
    lines = []
    for k, value in enumerate(menu, start=1):
        row = next((r for r in rows if r.get(slot) == value), {})
        extra = "; ".join(f"{s}: {row[s]}" for s in details if s in row)
        lines.append(f"{k}. {value}" + (f" ({extra})" if extra else ""))
    return "\n".join(lines)


def _history(turns: list[dict[str, Any]], i: int, keep: int = 6) -> str:
    speaker = {"USER": "User", "SYSTEM": "Assistant"}
    return "\n".join(f"{speaker[t['speaker']]}: {t['utterance']}"
                     for t in turns[max(0, i - keep):i])


def offer_turns(dialogue: dict[str, Any], limit: int = 4) -> list[tuple[str, HciTurn]]:
    """``(service, turn)`` for every SYSTEM frame that offers one of at least two results."""
    turns = dialogue["turns"]
    found = []
    for i, turn in enumerate(turns):
        if turn["speaker"] != "SYSTEM":
            continue
        for frame in turn["frames"]:
            offers = [a for a in frame["actions"] if a["act"] == "OFFER" and a["values"]]
            rows = frame.get("service_results") or []
            if not offers or len(rows) < 2:
                continue
            slot = offers[0]["slot"]
            menu = _menu(slot, offers[0]["values"][0], rows, limit)
            if len(menu) < 2:
                continue
            pick, why = derive_pick(turns, i, frame["service"], slot, menu)
            details = [a["slot"] for a in offers[1:]]
            found.append((frame["service"], HciTurn(_history(turns, i),
                                                    _options(menu, slot, details, rows),
                                                    menu, pick, why)))
    return found


def load_hci(data_dir: str | Path | None = None, max_turns: int = 2) -> list[HciInstance]:
    """Every dialogue with an offer turn: its first ``max_turns`` offers of one service."""
    found = []
    for dialogue in read_jsonl(data_path(data_dir, SGD_FILE)):
        turns = offer_turns(dialogue)
        if turns:
            service = turns[0][0]
            same = tuple(t for s, t in turns if s == service)[:max_turns]
            found.append(HciInstance(dialogue["dialogue_id"], service, same))
    return found


def think_time(rng: random.Random) -> float:
    """A user's think time in simulated seconds (lognormal, clipped)."""
    low, high = THINK_RANGE_S
    return round(min(high, max(low, rng.lognormvariate(math.log(THINK_MEDIAN_S), THINK_SIGMA))),
                 3)


class HciWorkload(Workload):
    """offer → user think → fulfil(pick) per offer turn of an SGD dialogue."""

    name = "hci"
    template = "hci"
    post_click_latency = True

    def __init__(self, data_dir: str | Path | None = None, max_turns: int = 2) -> None:
        super().__init__(data_dir)
        self.max_turns = max_turns

    def load(self) -> list[HciInstance]:
        """Every usable dialogue."""
        return load_hci(self.data_dir, self.max_turns)

    def instances(self, n: int, rng: random.Random) -> list[HciInstance]:
        """``n`` distinct dialogues, each turn with a sampled think time."""
        chosen = sample(self.pool(), n, rng, "SGD dialogues")
        return [replace(d, turns=tuple(replace(t, think_s=think_time(rng)) for t in d.turns))
                for d in chosen]

    async def run(self, trace: Trace, instance: HciInstance) -> None:
        """Each turn: the offer (opens the branch), the user's wait, the picked follow-up."""
        for turn in instance.turns:
            inputs = {"service": instance.service, "dialogue": turn.dialogue,
                      "options": turn.options}
            offer = await trace.call("offer", inputs=inputs, offered=turn.offered)
            await trace.user_wait(turn.think_s)
            await trace.call("fulfil", inputs=inputs, outputs={"offer": offer},
                             candidate=turn.pick, post_click=True)


__all__ = ["HciInstance", "HciTurn", "HciWorkload", "derive_pick", "load_hci", "offer_turns",
           "think_time"]
