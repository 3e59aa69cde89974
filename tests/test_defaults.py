"""Every setting's default lives once: each service's settings take the defaults of the core
objects they configure (or, in the gateway, the cores take the settings'), so a default changed
in one place is changed everywhere. Checked pair by pair."""

from __future__ import annotations

import inspect

import pytest

from services.admission.config import AdmissionSettings
from services.admission.core import ControllerSettings
from services.admission.load_view import FILL_SHARE, KV_BUDGET_SHARE, MAX_AGE_S
from services.corpus.config import CorpusSettings
from services.corpus.core import Corpus
from services.corpus.service import CorpusService
from services.csl.config import CslSettings
from services.csl.core import LibraryOptions
from services.delivery.config import DeliverySettings
from services.delivery.link import DEFAULT_FRAMING_BYTES, DEFAULT_WINDOW
from services.delivery.records import MAX_RECORD_AGE_S
from services.engine_agent.config import EngineAgentSettings
from services.engine_agent.leases.state import LeaseSettings
from services.gateway.config import GatewaySettings
from services.gateway.core import Limits
from services.gateway.reuse.library_path import MAX_PENDING_STORES
from services.gateway.speculation.state import BranchSettings


def _default(cls: type, parameter: str) -> object:
    """The default of one of ``cls``'s constructor parameters."""
    return inspect.signature(cls).parameters[parameter].default


C, L, B, LM, LS = ControllerSettings(), LibraryOptions(), BranchSettings(), Limits(), \
    LeaseSettings()
PAIRS = [
    (AdmissionSettings, {"window_s": C.window_s, "n0": C.n0, "cold_fanout": C.cold_fanout,
                         "class_prior_ms": C.class_prior_ms, "audit_rate": C.audit_rate,
                         "seed": C.seed, "default_gain_ms": C.default_gain_ms,
                         "fill_kv_blocks": C.fill_kv_blocks, "max_snapshots": C.max_snapshots,
                         "max_age_s": MAX_AGE_S, "fill_share": FILL_SHARE,
                         "kv_budget_share": KV_BUDGET_SHARE}),
    (CslSettings, {"budget_bytes": L.budget_bytes, "shadow_budget_bytes": L.shadow_budget_bytes,
                   "shadow_ttl_s": L.shadow_ttl_s, "create": L.create, "sync": L.sync,
                   "map_size_bytes": L.map_size}),
    (CorpusSettings, {"create": _default(Corpus, "create"), "sync": _default(Corpus, "sync"),
                      "map_size_bytes": _default(Corpus, "map_size"),
                      "refresh_fraction": _default(Corpus, "refresh_fraction"),
                      "write_lease_s": _default(CorpusService, "lease_s")}),
    (DeliverySettings, {"framing_bytes": DEFAULT_FRAMING_BYTES, "window": DEFAULT_WINDOW,
                        "max_record_age_s": MAX_RECORD_AGE_S}),
    (EngineAgentSettings, {"lease_mode": LS.mode, "lease_lifetime_s": LS.lifetime_s,
                           "lease_interval_s": LS.interval_s}),
    (GatewaySettings, {"fill_wait_s": B.fill_wait_s, "fill_timeout_s": B.fill_timeout_s,
                       "shadow_ttl_s": B.shadow_ttl_s, "branch_ttl_s": B.branch_ttl_s,
                       "max_branches": B.max_branches, "max_prompt_bytes": LM.max_prompt_bytes,
                       "max_request_id": LM.max_request_id, "max_in_flight": LM.max_in_flight,
                       "max_pending_stores": MAX_PENDING_STORES}),
]


@pytest.mark.parametrize(("settings", "core"), PAIRS, ids=[s.__name__ for s, _ in PAIRS])
def test_the_settings_defaults_are_the_cores(settings: type, core: dict[str, object]) -> None:
    fields = settings.model_fields
    assert {name: fields[name].default for name in core} == core
