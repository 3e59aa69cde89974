"""Typed service configuration from an optional YAML file and environment variables.

Precedence, lowest first: field defaults < YAML file < environment (``<PREFIX><KEY>``, e.g.
``DYNBRANCH_ENGINE_PORT``) < explicit overrides (command-line flags). Unknown keys and
out-of-range values fail start-up with a :class:`ConfigError` that names the key and its source.
This is the only module that reads ``os.environ``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

S = TypeVar("S", bound="ServiceSettings")


class ConfigError(ValueError):
    """Configuration that cannot start a service; the message names the key."""


class ServiceSettings(BaseModel):
    """Settings every service shares; each service subclasses it with its own fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Environment prefix of the service; subclasses override it.
    env_prefix: ClassVar[str] = "DYNBRANCH_"
    host: str = Field("127.0.0.1", description="address the gRPC server binds")
    port: int = Field(0, ge=0, le=65535, description="gRPC port; 0 picks a free one")
    metrics_port: int = Field(0, ge=-1, le=65535,
                              description="Prometheus port; 0 picks a free one, -1 disables")
    grace_s: float = Field(5.0, ge=0, le=600, description="in-flight calls drain this long on stop")
    drain_delay_s: float = Field(0.0, ge=0, le=60,
                                 description="NOT_SERVING is visible this long before stop")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["json", "text"] = "json"
    max_concurrent_rpcs: int = Field(16_384, ge=1, le=1_000_000, description=(
        "RPCs (streams included) the server runs at once; one more is refused by gRPC with "
        "RESOURCE_EXHAUSTED, never queued"))
    max_message_bytes: int = Field(4 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024,
                                   description="largest gRPC message accepted")
    otlp_endpoint: str = Field("", description="OTLP gRPC endpoint; empty exports no spans")
    tls_cert_file: str = Field("", description=(
        "PEM certificate of this service (its TLS server identity, and its client identity "
        "when it calls other services); empty: plaintext"))
    tls_key_file: str = Field("", description="PEM private key of tls_cert_file")
    tls_ca_file: str = Field("", description=(
        "PEM CA the mesh's certificates chain to: clients verify servers against it, and with "
        "tls_client_auth servers require client certificates it signed"))
    tls_client_auth: bool = Field(False, description=(
        "mutual TLS: refuse clients without a certificate signed by tls_ca_file"))
    reconnect_backoff_max_ms: int = Field(1000, ge=100, le=120_000, description=(
        "longest wait between reconnection attempts of this process's channels to the other "
        "services (gRPC's default, 120 s, left a gateway off a restarted shard for up to 14 s "
        "after a 60 s outage)"))
    reconnect_backoff_initial_ms: int = Field(100, ge=10, le=120_000, description=(
        "first wait before reconnecting a channel whose connection was lost"))
    health_port: int = Field(-1, ge=-1, le=65535, description=(
        "a plaintext port serving only the gRPC health service (Kubernetes gRPC probes cannot "
        "speak TLS); 0 picks a free one, -1: none (health is on the main port)"))

    @model_validator(mode="after")
    def _backoff_in_order(self) -> ServiceSettings:
        if self.reconnect_backoff_initial_ms > self.reconnect_backoff_max_ms:
            raise ValueError("reconnect_backoff_initial_ms must be <= reconnect_backoff_max_ms")
        return self


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {path}: not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: top level must be a mapping of keys")
    return data


def _env_value(raw: str) -> Any:
    """Environment values are strings; JSON lists and objects are decoded for list/dict fields."""
    if raw[:1] in "[{":
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


def _read_env(cls: type[ServiceSettings], prefix: str,
              environ: Mapping[str, str]) -> dict[str, Any]:
    known = set(cls.model_fields)
    values: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(prefix) or name == f"{prefix}CONFIG":
            continue
        key = name[len(prefix):].lower()
        if key not in known:
            raise ConfigError(f"environment {name}: unknown setting {key!r} "
                              f"(known: {', '.join(sorted(known))})")
        values[key] = _env_value(raw)
    return values


def _describe(exc: ValidationError, sources: Mapping[str, str]) -> str:
    lines = []
    for err in exc.errors():
        if not err["loc"]:  # a whole-model check; its message names the keys itself
            lines.append(str(err["msg"]).removeprefix("Value error, "))
            continue
        key = ".".join(str(p) for p in err["loc"])
        where = sources.get(str(err["loc"][0]) if err["loc"] else "", "default")
        lines.append(f"{key} (from {where}): {err['msg']}")
    return "invalid configuration: " + "; ".join(lines)


def load_settings(cls: type[S], *, config_file: str | Path | None = None,
                  environ: Mapping[str, str] | None = None, **overrides: Any) -> S:
    """Build ``cls`` from defaults, YAML, environment and overrides; raise ConfigError if bad."""
    environ = os.environ if environ is None else environ
    prefix = cls.env_prefix
    config_file = config_file or environ.get(f"{prefix}CONFIG") or None
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    layers = [
        (_read_yaml(Path(config_file)) if config_file else {}, f"file {config_file}"),
        (_read_env(cls, prefix, environ), "environment"),
        ({k: v for k, v in overrides.items() if v is not None}, "command line"),
    ]
    for values, source in layers:
        merged.update(values)
        sources.update(dict.fromkeys(values, source))
    if "otlp_endpoint" not in merged and environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        merged["otlp_endpoint"] = environ["OTEL_EXPORTER_OTLP_ENDPOINT"]
    try:
        return cls.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, sources)) from None


def env_port(prefix: str, key: str, environ: Mapping[str, str] | None = None) -> int | None:
    """A port setting from the environment (``<PREFIX><KEY>``; -1 may mean off), None when
    unset: a launcher reads it to place replicas on consecutive ports. ConfigError naming the
    variable when it is not a port."""
    name = f"{prefix}{key.upper()}"
    raw = (os.environ if environ is None else environ).get(name)
    if raw is None:
        return None
    try:
        port = int(raw)
    except ValueError:
        port = -2
    if not -1 <= port <= 65535:
        raise ConfigError(f"environment {name}: {raw!r} is not a port (-1 to 65535)")
    return port


def environment_value(name: str) -> str:
    """One process-wide setting from the environment ("" when unset), for the few that no
    service owns (e.g. ``DYNBRANCH_DATA_DIR``, the shared data sets' folder)."""
    return os.environ.get(name, "")


def export_environment_value(name: str, value: str) -> None:
    """Set a process-wide setting (a command-line flag's value) so that this process and the
    ones it starts read the same one."""
    os.environ[name] = value


__all__ = ["ConfigError", "ServiceSettings", "env_port", "environment_value",
           "export_environment_value", "load_settings"]
