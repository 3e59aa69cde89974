"""A service package's public face, loaded lazily (PEP 562): ``__all__`` is the in-process API
that ``loadgen``, the CLI and tests import from the package, and each name is imported from its
module only when first asked for, so importing one small module of a service (its settings, its
client, the engine registry in the vLLM plugin's processes) pulls in nothing else. For type
checkers and IDEs a face imports the same names under ``if TYPE_CHECKING:`` and builds its table
only at run time (``else:``), so other services see real types; ``tests/test_types.py`` keeps
the two equal."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_face(package: str, exports: Mapping[str, str]) -> tuple[list[str], Callable[[str], Any]]:
    """``(__all__, __getattr__)`` of ``package``, whose public ``name`` lives in the submodule
    ``exports[name]`` (a module path relative to the package)."""

    def attribute(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return sorted(exports), attribute


__all__ = ["lazy_face"]
