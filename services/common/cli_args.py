"""Command-line flags every service entry point shares, turned into settings overrides."""

from __future__ import annotations

import argparse
from typing import Any

import yaml

from services.common.config import ConfigError


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


__all__ = ["add_service_args", "overrides_from"]
