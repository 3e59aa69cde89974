"""Freshness of a stored result (``reuse.freshness.Freshness``): current only while every tool
that owns one of its records says so; a tool that cannot say makes it not current without
calling it stale."""

from __future__ import annotations

from collections.abc import Sequence

from services.common.values.errors import Unavailable
from services.gateway.reuse.freshness import Freshness

READS = [("corpus/wiki/doc/oslo", 3)]


class _Tool:
    name, read_only = "retrieve", True

    def __init__(self, answer: bool | None) -> None:
        self.answer = answer
        self.asked: list[Sequence[tuple[str, int]]] = []

    async def reads_current(self, reads: Sequence[tuple[str, int]]) -> bool:
        self.asked.append(reads)
        if self.answer is None:
            raise Unavailable("the corpus is unreachable")
        return self.answer


def _freshness(answer: bool | None) -> tuple[Freshness, _Tool]:
    tool = _Tool(answer)
    return Freshness({"retrieve": tool}), tool  # type: ignore[dict-item]


async def test_reads_are_current_when_their_tool_says_so_and_every_tool_is_asked() -> None:
    freshness, tool = _freshness(True)
    assert await freshness.reads_current(READS) is True and tool.asked == [READS]
    assert await Freshness({}).reads_current(READS) is True  # no tool owns them: the library does


async def test_a_record_moved_on_is_stale_and_an_unreachable_tool_is_not_current() -> None:
    assert await _freshness(False)[0].reads_current(READS) is False
    assert await _freshness(None)[0].reads_current(READS) is None
