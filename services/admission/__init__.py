"""Admission (C3, dynbranch §3.4): which branches open and which candidates fill, priced
against live engine load.

Core: the priced controller (``core``: the generation gate ``generation_gate``, the fill
gate ``fill_gate``, prices ``pricing``, the load view ``load_view``, the ledger, learned state
``state_store``), the baselines (``baselines``, ``fixed_rule``) and the table of policies
(``policies``); ``replay`` checks recorded decisions. Adapters: ``adapters/engine_load`` (the
engines' load streams). Edge: ``servicer``, ``server``, ``client``. The face below is the
in-process API (``services.common.values.face``).
"""

from services.common.values.face import lazy_face

__all__, __getattr__ = lazy_face(__name__, {
    "AdmissionPolicy": "core", "AdmissionSettings": "config", "BranchOutcome": "core",
    "ControllerSettings": "core", "EngineLoad": "load_view", "LoadTracker": "load_view",
    "POLICIES": "policies", "PricedController": "core", "Proposal": "core",
    "RemoteAdmission": "client", "StaticAdmission": "client", "build_policy": "policies",
    "build_runtime": "server", "estimate_fields": "client", "proposal": "core",
})
