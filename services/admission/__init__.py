"""Admission (C3, dynbranch §3.4): which branches open and which candidates fill, priced
against live engine load.

Core: the priced controller (``core``: the generation gate ``generation_gate``, the fill
gate ``fill_gate``, prices ``pricing``, the load view ``load_view``, the ledger, learned state
``state_store``), the baselines (``baselines``, ``fixed_rule``) and the table of policies
(``policies``); ``replay`` checks recorded decisions. Adapters: ``adapters/engine_load`` (the
engines' load streams). Edge: ``servicer``, ``server``, ``client``. The face below is the
in-process API (``services.common.values.face``).
"""

from typing import TYPE_CHECKING

from services.common.values.face import lazy_face

if TYPE_CHECKING:  # the table's names, typed, for mypy and IDEs (tests/test_types.py)
    from services.admission.client import RemoteAdmission as RemoteAdmission
    from services.admission.client import StaticAdmission as StaticAdmission
    from services.admission.client import estimate_fields as estimate_fields
    from services.admission.config import AdmissionSettings as AdmissionSettings
    from services.admission.core import AdmissionPolicy as AdmissionPolicy
    from services.admission.core import BranchOutcome as BranchOutcome
    from services.admission.core import ControllerSettings as ControllerSettings
    from services.admission.core import PricedController as PricedController
    from services.admission.core import Proposal as Proposal
    from services.admission.core import proposal as proposal
    from services.admission.load_view import EngineLoad as EngineLoad
    from services.admission.load_view import LoadTracker as LoadTracker
    from services.admission.policies import POLICIES as POLICIES
    from services.admission.policies import build_policy as build_policy
    from services.admission.server import build_runtime as build_runtime
else:  # at run time: each name imported from its module when first used
    __all__, __getattr__ = lazy_face(__name__, {
        "AdmissionPolicy": "core", "AdmissionSettings": "config", "BranchOutcome": "core",
        "ControllerSettings": "core", "EngineLoad": "load_view", "LoadTracker": "load_view",
        "POLICIES": "policies", "PricedController": "core", "Proposal": "core",
        "RemoteAdmission": "client", "StaticAdmission": "client", "build_policy": "policies",
        "build_runtime": "server", "estimate_fields": "client", "proposal": "core",
    })
