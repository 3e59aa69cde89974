"""Delivery (LADS, ``papers/lads.txt``): returning tool results to the engines that hold
their histories, ordered together with KV-prefix leases.

Core: ``core`` (``DeliveryCore``: pending results, idempotent delivery), the sender
(``sender``, ``frames``, ``link``), record validity (``records``) and the policies
(``policies``). Adapters: ``adapters/engines`` (the engine agents' lease and result RPCs). Edge:
``servicer``, ``server``, ``client``. The face below is the in-process API
(``services.common.values.face``).
"""

from services.common.values.face import lazy_face

__all__, __getattr__ = lazy_face(__name__, {
    "DeliveryClient": "client", "DeliveryCore": "core", "DeliverySettings": "config",
    "Frame": "frames", "POLICIES": "policies", "Sender": "sender", "build_runtime": "server",
    "make_policy": "policies",
})
