"""The admission service's durable learned state (``state_store``): atomic JSON, a clear error
for a file that is not a state, nothing for a missing one."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.admission import state_store
from services.common.values.errors import InvalidArgument


def test_a_saved_state_loads_back_and_a_missing_file_is_no_state(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "state.json"
    assert state_store.load(path) is None
    state_store.save(path, {"version": 2, "gate": {"a/b": {"n": 3}}})
    assert state_store.load(path) == {"version": 2, "gate": {"a/b": {"n": 3}}}
    state_store.save(path, {"version": 2})  # replaced whole, never half-written
    assert state_store.load(path) == {"version": 2}
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]  # no temp file left


@pytest.mark.parametrize("text", ["not json", "[1, 2]"])
def test_a_file_that_is_not_a_state_is_refused_naming_the_setting(tmp_path: Path,
                                                                  text: str) -> None:
    path = tmp_path / "state.json"
    path.write_text(text)
    with pytest.raises(InvalidArgument) as info:
        state_store.load(path)
    assert info.value.field == "state_path"
