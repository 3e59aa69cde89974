"""The embedded vLLM backend's environment (no vLLM import): batch-invariant kernels are on
exactly where vLLM has them, unless a setting says otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.engine_agent.backends.vllm import settings as vllm_settings
from services.engine_agent.backends.vllm.settings import VllmSettings, engine_environment


@pytest.mark.parametrize(("available", "setting", "expected"), [
    (True, None, "1"), (False, None, "0"), (True, False, "0"), (False, True, "1")])
def test_batch_invariant_follows_the_platform_unless_set(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, available: bool,
        setting: bool | None, expected: str) -> None:
    monkeypatch.setattr(vllm_settings, "batch_invariant_available", lambda: available)
    env = engine_environment(VllmSettings(model_path="m", batch_invariant=setting), tmp_path)
    assert env["VLLM_BATCH_INVARIANT"] == expected

