"""Gateway: the front door; stage demands, C1 probes, C2 branches, routing to engine agents.

The layout follows one demand from the edge down (DESIGN.md §3); a module imports only modules
below it, never one above (``tests/test_layering.py`` checks it):

- edges: ``server`` (entry point and wiring), ``servicer`` (gRPC), ``http/`` (OpenAI-compatible
  front), ``auth`` (API keys to tenants); ``client``, ``sdk`` and ``tagging/`` (the
  ``x-dynbranch-*`` headers of an HTTP harness, from a context) are what harnesses import.
- ``core``: the protocol-free composition root (demands, templates, writes, settlements).
- ``stages``: the canonical demand path (speculation once, library probe, execution, store).
- ``speculation/``: early fill (C2), behind ``ports.SpeculationPort``: branches, fills, their
  state and the candidate predictors.
- ``reuse/``: the gateway's half of exact reuse (C1): naming, freshness, single-flight and the
  library path (probe, a hit's freshness, stores).
- ``execution``: running one stage on an engine or a builtin tool.
- ``adapters/``: the ports over the other services (engine agents with routing, the csl).
- ``ports``, ``values``, ``pace``, ``templates/``, ``tools/``: the vocabulary everything above
  builds on (``pace``: the decode pace the executor learns and speculation reads).

The face below is the in-process API (``services.common.values.face``).
"""

from services.common.values.face import lazy_face

__all__, __getattr__ = lazy_face(__name__, {
    "Answer": "values", "AnswerSource": "values", "BranchManager": "speculation.branches",
    "BranchSettings": "speculation.state", "CompositePredictor": "speculation.predictors",
    "CoreStats": "core", "CorpusTitles": "speculation.titles", "Demand": "values",
    "DynbranchClient": "sdk", "EngineState": "adapters.router", "Execution": "ports",
    "Executor": "execution", "Features": "values", "GatewayClient": "client",
    "GatewayCore": "core", "GatewaySettings": "config", "InprocEngines": "adapters.inproc",
    "InprocLibrary": "adapters.inproc", "LOCAL_TENANT": "auth", "Limits": "core",
    "PROMOTION_COUNTERS": "speculation.promotion", "PredictionContext": "speculation.predictors",
    "REFUSALS": "speculation.state", "Router": "adapters.router",
    "ShardedLibrary": "adapters.sharded_library", "StageService": "stages",
    "TITLE_WEIGHT": "speculation.titles", "TemplateRegistry": "templates", "Window": "templates",
    "answer_to_proto": "servicer", "build_core": "server", "build_runtime": "server",
    "default_predictor": "speculation.predictors", "demand_from_proto": "servicer",
    "hop": "adapters.inproc",
    # the harness side of the HTTP front: x-dynbranch-* headers from a context (tagging/)
    "AsyncTaggingTransport": "tagging.transport", "LangGraphTagger": "tagging.langgraph",
    "Tags": "tagging.context", "TaggingTransport": "tagging.transport",
    "async_tagging_client": "tagging.transport", "atag_request": "tagging.transport",
    "current_tags": "tagging.context", "tag_request": "tagging.transport",
    "tagged": "tagging.context", "tagging_client": "tagging.transport",
})
