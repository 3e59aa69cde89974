"""Command-line flags every service entry point shares, turned into settings overrides."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from services.common.runtime.server import run_service
from services.common.runtime.tls import TlsError
from services.common.values.config import ConfigError, ServiceSettings, load_settings
from services.common.values.telemetry import configure_logging


def add_service_args(parser: argparse.ArgumentParser) -> None:
    """Flags common to every service: config file, bind address, logs, and ``--set KEY=VALUE``."""
    parser.add_argument("--config", metavar="FILE", help="YAML settings file")
    parser.add_argument("--host", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="gRPC port (0 picks a free one)")
    parser.add_argument("--metrics-port", type=int, help="Prometheus port (0 free, -1 off)")
    parser.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--log-format", choices=["json", "text"])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="any other setting (repeatable); VALUE is parsed as YAML")


def overrides_from(args: argparse.Namespace) -> dict[str, Any]:
    """Settings overrides from parsed flags (``None`` values are left to lower layers)."""
    out: dict[str, Any] = {"host": args.host, "port": args.port,
                           "metrics_port": args.metrics_port, "log_level": args.log_level,
                           "log_format": args.log_format}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        out[key.strip().replace("-", "_")] = yaml.safe_load(value) if value else ""
    return out




@dataclass(frozen=True, slots=True)
class Flag:
    """A service-specific flag that sets one setting (``--engine-id`` → ``engine_id``)."""

    name: str
    setting: str
    help: str
    options: dict[str, Any] = field(default_factory=dict)


def service_main(argv: list[str] | None, *, service: str, description: str,
                 settings_cls: type[ServiceSettings],
                 build: Callable[[Any], Awaitable[Any]], flags: Sequence[Flag] = (),
                 fatal: tuple[type[BaseException], ...] = ()) -> int:
    """The entry point every service shares: flags → settings → logs → serve until SIGTERM.

    A configuration error, a TLS file that cannot be used, or a start-up error of a class in
    ``fatal`` (e.g. a corrupt store) prints one line naming the problem and exits 2.
    """
    parser = argparse.ArgumentParser(prog=f"dynbranch serve {service}", description=description)
    add_service_args(parser)
    for flag in flags:
        parser.add_argument(flag.name, dest=flag.setting, help=flag.help, **flag.options)
    args = parser.parse_args(argv)
    values = {f.setting: getattr(args, f.setting) for f in flags}
    values.update({k: v for k, v in overrides_from(args).items() if v is not None})
    try:
        settings = load_settings(settings_cls, config_file=args.config, **values)
    except ConfigError as exc:
        print(f"{service}: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    try:
        return run_service(lambda: build(settings))
    except (TlsError, *fatal) as exc:  # type: ignore[misc]  # mypy reads no starred tuple
        print(f"{service}: {exc}", file=sys.stderr)
        return 2


__all__ = ["Flag", "add_service_args", "overrides_from", "service_main"]
