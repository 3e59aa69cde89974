"""The lease port (``leases.port.LeasePort``): every backend that offers leases implements each
of its operations with the protocol's parameters and kind (coroutine or property), so the
provider drives the sim and the embedded vLLM the same way."""

from __future__ import annotations

import inspect

import pytest

from services.engine_agent.backends.sim import SimBackend
from services.engine_agent.backends.vllm.lease_port import VllmLeasePort
from services.engine_agent.leases.port import LeasePort

OPERATIONS = [name for name, _ in inspect.getmembers(LeasePort)
              if not name.startswith("_") and name in LeasePort.__dict__]


@pytest.mark.parametrize("port", [SimBackend, VllmLeasePort])
def test_every_lease_operation_is_implemented_as_the_protocol_says(port: type) -> None:
    assert len(OPERATIONS) == 8
    for name in OPERATIONS:
        want, have = LeasePort.__dict__[name], getattr(port, name, None)
        assert have is not None, (port.__name__, name)
        if isinstance(want, property):
            assert isinstance(have, property), (port.__name__, name)
            continue
        assert inspect.iscoroutinefunction(have), (port.__name__, name)
        assert list(inspect.signature(have).parameters) == \
            list(inspect.signature(want).parameters), (port.__name__, name)
