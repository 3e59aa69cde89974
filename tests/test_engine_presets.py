"""``dynbranch up --backend``: presets resolve per backend, flags are checked by name, and each
real backend's agents get the settings that start it (no engine needed here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.cli import SIM_PRESET, _spec, build_parser
from services.engine_presets import engine_setup, resolve_preset
from services.launcher import MeshSpec, ProcessMesh


def spec(*argv: str) -> MeshSpec:
    return _spec(build_parser().parse_args(["up", *argv]))


def test_sim_keeps_its_cost_model_preset_and_real_backends_default_to_tiny_cpu() -> None:
    assert spec().backend == "sim" and spec().preset == SIM_PRESET
    for backend in ("vllm", "openai", "sglang"):
        chosen = spec("--backend", backend)
        assert chosen.backend == backend and chosen.preset == "tiny-cpu"


def test_unknown_presets_and_misplaced_urls_are_refused_by_name() -> None:
    with pytest.raises(SystemExit, match="--preset: sglang has no preset 'h200'"):
        spec("--backend", "sglang", "--preset", "h200")
    with pytest.raises(SystemExit, match="--engine-url: only --backend openai or sglang"):
        spec("--backend", "vllm", "--engine-url", "http://127.0.0.1:1")
    with pytest.raises(ValueError, match="--backend: unknown 'tgi'"):
        resolve_preset("tgi", "tiny-cpu", SIM_PRESET)


async def test_agents_point_at_given_servers_without_launching_any(tmp_path: Path) -> None:
    one = await engine_setup("sglang", "tiny-cpu", 2, "qwen3-32b", tmp_path,
                             ("http://127.0.0.1:30000",))
    assert one.servers == []
    assert one.settings == [["backend=sglang", "engine_url=http://127.0.0.1:30000"]] * 2
    each = await engine_setup("openai", "tiny-cpu", 2, "m", tmp_path, ("http://a:1", "http://b:2"))
    assert [s[1] for s in each.settings] == ["engine_url=http://a:1", "engine_url=http://b:2"]
    with pytest.raises(ValueError, match="one per engine"):
        await engine_setup("openai", "tiny-cpu", 3, "m", tmp_path, ("http://a:1", "http://b:2"))


async def test_embedded_vllm_agents_get_the_model_folder(tmp_path: Path) -> None:
    setup = await engine_setup("vllm", "tiny-cpu", 1, "qwen3-32b", tmp_path,
                               model_path=str(tmp_path))
    assert setup.settings == [["backend=vllm", f"model_path={tmp_path}", "max_running=16"]]


def test_a_real_backend_passes_no_sim_flags_to_its_agents() -> None:
    assert ProcessMesh._sim(MeshSpec(backend="sglang", preset="tiny-cpu")) == []
    assert ProcessMesh._sim(MeshSpec(preset="p", time_scale=0.5)) == [
        "--preset", "p", "--time-scale", "0.5"]
