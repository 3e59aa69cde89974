"""Delivery (LADS, ``papers/lads.txt``): returning tool results to the engines that hold
their histories, ordered together with KV-prefix leases.

Core: ``core`` (``DeliveryCore``: pending results, idempotent delivery), the sender
(``sender``, ``frames``, ``link``), record validity (``records``) and the policies
(``policies``). Adapters: ``adapters/engines`` (the engine agents' lease and result RPCs). Edge:
``servicer``, ``server``, ``client``. The face below is the in-process API
(``services.common.values.face``).
"""

from typing import TYPE_CHECKING

from services.common.values.face import lazy_face

if TYPE_CHECKING:  # the table's names, typed, for mypy and IDEs (tests/test_types.py)
    from services.delivery.client import DeliveryClient as DeliveryClient
    from services.delivery.config import DeliverySettings as DeliverySettings
    from services.delivery.core import DeliveryCore as DeliveryCore
    from services.delivery.frames import Frame as Frame
    from services.delivery.policies import POLICIES as POLICIES
    from services.delivery.policies import make_policy as make_policy
    from services.delivery.sender import Sender as Sender
    from services.delivery.server import build_runtime as build_runtime
else:  # at run time: each name imported from its module when first used
    __all__, __getattr__ = lazy_face(__name__, {
        "DeliveryClient": "client", "DeliveryCore": "core", "DeliverySettings": "config",
        "Frame": "frames", "POLICIES": "policies", "Sender": "sender", "build_runtime": "server",
        "make_policy": "policies",
    })
