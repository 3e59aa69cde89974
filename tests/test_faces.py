"""Every service's public face (its package ``__init__``): each name in ``__all__`` resolves to
the object its module defines, an unknown name is an AttributeError, and importing a face
imports nothing of the service until a name is used (the vLLM plugin loads the engine agent's
package in vLLM's own processes)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

SERVICES = ("admission", "corpus", "csl", "delivery", "engine_agent", "gateway")


@pytest.mark.parametrize("service", SERVICES)
def test_every_public_name_resolves(service: str) -> None:
    face = importlib.import_module(f"services.{service}")
    assert face.__all__, service
    for name in face.__all__:
        value = getattr(face, name)  # imports the module that defines it
        if callable(value) and hasattr(value, "__module__"):  # classes and functions
            assert value.__module__.startswith(f"services.{service}."), (service, name)
            assert getattr(sys.modules[value.__module__], name) is value, (service, name)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = face.nope


def test_a_face_imports_nothing_until_a_name_is_used() -> None:
    code = ("import sys, services.engine_agent, services.gateway, services.admission, "
            "services.csl, services.delivery, services.corpus;"
            "loaded=[m for m in sys.modules if m.startswith('services.') and m.count('.') >= 2"
            " and not m.startswith('services.common.')];"
            "print(','.join(sorted(loaded)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == ""
