"""One request's engine-side state (``sim.sequence.Sequence``, vLLM's ``Request``): sampling to
``max_tokens``, EOS, and stop strings cut from the text, which is held back while it could still
become one."""

from __future__ import annotations

from services.common.values.generation import FinishReason
from services.engine_agent.sim.sequence import SeqState, Sequence
from services.engine_agent.sim.tokenizer import PseudoText
from tests.engine_agent.sim_factories import make_request


def seq(eos_at: int | None = None, **sampling: object) -> Sequence:
    return Sequence(make_request("r", **sampling), (1, 2, 3), [], PseudoText(7, eos_at), 0.0)


def test_a_new_sequence_waits_with_its_whole_prompt_pending() -> None:
    s = seq()
    assert s.state is SeqState.WAITING and s.num_pending == 3 and s.output_tokens == 0


def test_sampling_ends_at_max_tokens_or_at_eos() -> None:
    s = seq(max_tokens=3)
    assert [s.sample(1024) for _ in range(3)] == [None, None, FinishReason.LENGTH]
    assert s.take_delta().tokens == 3 and s.take_delta().tokens == 0
    e = seq(eos_at=1, max_tokens=10)
    assert e.sample(1024) is None and e.sample(1024) is FinishReason.STOP
    assert seq(max_tokens=10).sample(4) is FinishReason.LENGTH  # the context is full


def test_a_stop_string_ends_and_is_cut_from_the_text() -> None:
    free = seq(max_tokens=40)
    text = ""
    while free.sample(4096) is None:
        pass
    text = free.text
    stop = text[5:8]
    s = seq(max_tokens=40, stop=(stop,))
    while (reason := s.sample(4096)) is None:
        pass
    s.flush_text()
    assert reason is FinishReason.STOP and s.text == text[:text.find(stop)]
    assert s.stop_string == stop and free.stop_string == ""  # which stop string ended it
    assert "".join(s.pending_text) == s.text  # nothing held back once it ended
