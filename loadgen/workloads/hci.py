"""HCI offered actions over Schema-Guided Dialogue (dynbranch §2.1, §5.1; template ``hci``).

A workflow is one SGD dialogue's first offer turns. Per turn: the assistant's ``offer`` stage
shows a menu (the SYSTEM frame's ``service_results`` labelled by the OFFER act's slot) and opens an
independent branch over it; the user thinks for a sampled time (lognormal, median 2.7 simulated
seconds: the paper's human-wait window, Fig. 1), then the picked option's ``fulfil`` stage runs.
The reported latency is the user turn after the click (§5.1).

No answer leaks through the menu: it lists the results in the service's own order, the option
the assistant offered is only guaranteed a place (never the first one), and ``instances`` shuffles
each menu with the run's seed. The pick comes from the user's next turn only: a SELECT naming a
menu entry, a SELECT without values (the user takes the option the assistant offered), or an
INFORM of the slot naming a menu entry. Turns whose pick cannot be derived that way are dropped
and counted (``HciWorkload.dropped_turns``, ``load_hci(counts=...)``).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadgen.workloads.base import Decision, Trace, Workload, data_path, read_jsonl, sample

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
    #: Per menu entry, its details as the menu shows them (``slot: value; ...``).
    details: tuple[str, ...] = ()

    def shuffled(self, rng: random.Random) -> HciTurn:
        """This turn with its menu in an order drawn from ``rng`` (options re-rendered)."""
        order = rng.sample(range(len(self.offered)), len(self.offered))
        menu = tuple(self.offered[k] for k in order)
        details = tuple(self.details[k] for k in order) if self.details else ()
        return replace(self, offered=menu, details=details, options=_render(menu, details))


@dataclass(frozen=True, slots=True)
class HciInstance:
    """One dialogue's offer turns."""

    key: str
    service: str
    turns: tuple[HciTurn, ...]


def _acts(turn: dict[str, Any], service: str) -> list[dict[str, Any]]:
    frames = [f for f in turn["frames"] if f["service"] == service] or turn["frames"]
    return [a for f in frames for a in f["actions"]]


def derive_pick(turns: list[dict[str, Any]], i: int, service: str, slot: str,
                menu: tuple[str, ...], offered: str = "") -> tuple[str, str]:
    """The option the user picked in the turn after SYSTEM turn ``i``, and how it was derived.

    ``("", reason)`` when the user's turn does not pick a menu entry: the turn is dropped.
    """
    if i + 1 >= len(turns):
        return "", "no_user_turn"
    acts = _acts(turns[i + 1], service)
    for act in acts:
        if act["act"] == "SELECT":
            named = [v for v in act["values"] if v in menu]
            if named:
                return named[0], "select"
            if not act["values"] and offered in menu:
                return offered, "select_offer"
    for act in acts:
        if act["act"] == "INFORM" and act["slot"] == slot:
            named = [v for v in act["values"] if v in menu]
            if named:
                return named[0], "inform"
    if any(act["act"] == "REQUEST_ALTS" for act in acts):
        return "", "request_alts"
    return "", "not_derivable"


def _menu(slot: str, offered: str, rows: list[dict[str, str]], limit: int) -> tuple[str, ...]:
    """The results' values in the service's order; the offered one keeps a place (the last
    place of the cut when it would fall outside it)."""
    values = tuple(v for v in dict.fromkeys(row.get(slot, "") for row in rows) if v)
    menu = values[:limit]
    if offered and offered not in menu:
        menu = (*menu[:limit - 1], offered)
    return menu


def _details(menu: tuple[str, ...], slot: str, details: list[str],
             rows: list[dict[str, str]]) -> tuple[str, ...]:
    out = []
    for value in menu:
        row = next((r for r in rows if r.get(slot) == value), {})
        out.append("; ".join(f"{s}: {row[s]}" for s in details if s in row))
    return tuple(out)


def _render(menu: tuple[str, ...], details: tuple[str, ...]) -> str:
    extras = details or ("",) * len(menu)
    return "\n".join(f"{k}. {value}" + (f" ({extra})" if extra else "")
                     for k, (value, extra) in enumerate(zip(menu, extras, strict=True), start=1))


def _history(turns: list[dict[str, Any]], i: int, keep: int = 6) -> str:
    speaker = {"USER": "User", "SYSTEM": "Assistant"}
    return "\n".join(f"{speaker[t['speaker']]}: {t['utterance']}"
                     for t in turns[max(0, i - keep):i])


def offer_turns(dialogue: dict[str, Any], limit: int = 4,
                counts: Counter[str] | None = None) -> list[tuple[str, HciTurn]]:
    """``(service, turn)`` for every SYSTEM frame that offers one of at least two results and
    whose pick the user's next turn names; ``counts`` tallies kept and dropped turns by reason."""
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
            pick, why = derive_pick(turns, i, frame["service"], slot, menu,
                                    offers[0]["values"][0])
            if counts is not None:
                counts[why if pick else f"dropped:{why}"] += 1
            if not pick:
                continue
            details = _details(menu, slot, [a["slot"] for a in offers[1:]], rows)
            found.append((frame["service"], HciTurn(_history(turns, i), _render(menu, details),
                                                    menu, pick, why, details=details)))
    return found


def load_hci(data_dir: str | Path | None = None, max_turns: int = 2,
             counts: Counter[str] | None = None) -> list[HciInstance]:
    """Every dialogue with a usable offer turn: its first ``max_turns`` offers of one service
    (menus in the service's order; ``HciWorkload.instances`` shuffles them)."""
    found = []
    for dialogue in read_jsonl(data_path(data_dir, SGD_FILE)):
        turns = offer_turns(dialogue, counts=counts)
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
    low_rate = 0.3
    template = "hci"
    data_files = (SGD_FILE,)
    post_click_latency = True

    def __init__(self, data_dir: str | Path | None = None, max_turns: int = 2,
                 **split: Any) -> None:
        super().__init__(data_dir, **split)
        self.max_turns = max_turns
        #: Offer turns by how the pick was derived; ``dropped:<reason>`` for dropped ones.
        self.turn_counts: Counter[str] = Counter()

    @property
    def dropped_turns(self) -> int:
        """Offer turns dropped because the user's next turn names no pick (all splits)."""
        self.pool()
        return sum(v for k, v in self.turn_counts.items() if k.startswith("dropped:"))

    def load(self) -> list[HciInstance]:
        """Every usable dialogue; counts kept and dropped turns."""
        self.turn_counts.clear()
        return load_hci(self.data_dir, self.max_turns, counts=self.turn_counts)

    def decisions(self, n: int, rng: random.Random) -> list[Decision]:
        """The offer decision per turn: the menu as offered, and the user's pick."""
        return [Decision("hci/offer", t.offered, t.pick)
                for d in self.instances(n, rng) for t in d.turns]

    def instances(self, n: int, rng: random.Random) -> list[HciInstance]:
        """``n`` distinct dialogues of the split, each menu shuffled, each turn with a sampled
        think time."""
        chosen = sample(self.split_pool(), n, rng, "SGD dialogues")
        return [replace(d, turns=tuple(replace(t.shuffled(rng), think_s=think_time(rng))
                                       for t in d.turns)) for d in chosen]

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
