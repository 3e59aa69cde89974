"""Settings load from defaults, YAML, environment and overrides, and fail naming the bad key."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest
from pydantic import ValidationError

from services.common.values.config import ConfigError, ServiceSettings, load_settings


class DemoSettings(ServiceSettings):
    env_prefix: ClassVar[str] = "DYNBRANCH_DEMO_"
    engines: list[str] = []
    ratio: float = 0.5


def test_precedence_is_defaults_then_yaml_then_env_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("port: 7000\nratio: 0.1\ngrace_s: 2\n")
    env = {"DYNBRANCH_DEMO_PORT": "7001", "DYNBRANCH_DEMO_RATIO": "0.2"}
    s = load_settings(DemoSettings, config_file=path, environ=env, port=7002)
    assert (s.port, s.ratio, s.grace_s, s.host) == (7002, 0.2, 2.0, "127.0.0.1")


def test_env_json_list_is_decoded() -> None:
    s = load_settings(DemoSettings, environ={"DYNBRANCH_DEMO_ENGINES": '["a:1", "b:2"]'})
    assert s.engines == ["a:1", "b:2"]


def test_config_file_named_by_env(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("ratio: 0.75\n")
    assert load_settings(DemoSettings, environ={"DYNBRANCH_DEMO_CONFIG": str(path)}).ratio == 0.75


@pytest.mark.parametrize("text, needle", [
    ("prot: 1\n", "prot (from file"),
    ("port: 70000\n", "port (from file"),
    ("- a\n- b\n", "top level must be a mapping"),
    ("port: [\n", "not valid YAML"),
])
def test_bad_yaml_is_refused_naming_the_key(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[").replace("(", r"\(")):
        load_settings(DemoSettings, config_file=path, environ={})


def test_unknown_environment_key_is_refused() -> None:
    with pytest.raises(ConfigError, match="DYNBRANCH_DEMO_PROT"):
        load_settings(DemoSettings, environ={"DYNBRANCH_DEMO_PROT": "1"})


def test_out_of_range_env_value_names_key_and_source() -> None:
    with pytest.raises(ConfigError, match=r"grace_s \(from environment\)"):
        load_settings(DemoSettings, environ={"DYNBRANCH_DEMO_GRACE_S": "-1"})


def test_missing_config_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings(DemoSettings, config_file=tmp_path / "nope.yaml", environ={})


def test_otlp_endpoint_comes_from_standard_otel_variable() -> None:
    s = load_settings(DemoSettings, environ={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"})
    assert s.otlp_endpoint == "http://c:4317"


def test_settings_are_frozen() -> None:
    s = load_settings(DemoSettings, environ={})
    with pytest.raises(ValidationError):
        s.port = 1  # type: ignore[misc]
