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

from typing import TYPE_CHECKING

from services.common.values.face import lazy_face

if TYPE_CHECKING:  # the table's names, typed, for mypy and IDEs (tests/test_types.py)
    from services.gateway.adapters.inproc import InprocEngines as InprocEngines
    from services.gateway.adapters.inproc import InprocLibrary as InprocLibrary
    from services.gateway.adapters.inproc import hop as hop
    from services.gateway.adapters.router import EngineState as EngineState
    from services.gateway.adapters.router import Router as Router
    from services.gateway.adapters.sharded_library import ShardedLibrary as ShardedLibrary
    from services.gateway.auth import LOCAL_TENANT as LOCAL_TENANT
    from services.gateway.client import GatewayClient as GatewayClient
    from services.gateway.config import GatewaySettings as GatewaySettings
    from services.gateway.core import CoreStats as CoreStats
    from services.gateway.core import GatewayCore as GatewayCore
    from services.gateway.core import Limits as Limits
    from services.gateway.execution import Executor as Executor
    from services.gateway.ports import Execution as Execution
    from services.gateway.sdk import DynbranchClient as DynbranchClient
    from services.gateway.server import build_core as build_core
    from services.gateway.server import build_runtime as build_runtime
    from services.gateway.servicer import answer_to_proto as answer_to_proto
    from services.gateway.servicer import demand_from_proto as demand_from_proto
    from services.gateway.speculation.branches import BranchManager as BranchManager
    from services.gateway.speculation.predictors import CompositePredictor as CompositePredictor
    from services.gateway.speculation.predictors import PredictionContext as PredictionContext
    from services.gateway.speculation.predictors import default_predictor as default_predictor
    from services.gateway.speculation.promotion import PROMOTION_COUNTERS as PROMOTION_COUNTERS
    from services.gateway.speculation.state import REFUSALS as REFUSALS
    from services.gateway.speculation.state import BranchSettings as BranchSettings
    from services.gateway.speculation.titles import TITLE_WEIGHT as TITLE_WEIGHT
    from services.gateway.speculation.titles import CorpusTitles as CorpusTitles
    from services.gateway.stages import StageService as StageService
    from services.gateway.tagging.context import Tags as Tags
    from services.gateway.tagging.context import current_tags as current_tags
    from services.gateway.tagging.context import tagged as tagged
    from services.gateway.tagging.langgraph import LangGraphTagger as LangGraphTagger
    from services.gateway.tagging.transport import AsyncTaggingTransport as AsyncTaggingTransport
    from services.gateway.tagging.transport import TaggingTransport as TaggingTransport
    from services.gateway.tagging.transport import async_tagging_client as async_tagging_client
    from services.gateway.tagging.transport import atag_request as atag_request
    from services.gateway.tagging.transport import tag_request as tag_request
    from services.gateway.tagging.transport import tagging_client as tagging_client
    from services.gateway.templates import TemplateRegistry as TemplateRegistry
    from services.gateway.templates import Window as Window
    from services.gateway.values import Answer as Answer
    from services.gateway.values import AnswerSource as AnswerSource
    from services.gateway.values import Demand as Demand
    from services.gateway.values import Features as Features
else:  # at run time: each name imported from its module when first used
    __all__, __getattr__ = lazy_face(__name__, {
        "Answer": "values", "AnswerSource": "values", "BranchManager": "speculation.branches",
        "BranchSettings": "speculation.state", "CompositePredictor": "speculation.predictors",
        "CoreStats": "core", "CorpusTitles": "speculation.titles", "Demand": "values",
        "DynbranchClient": "sdk", "EngineState": "adapters.router", "Execution": "ports",
        "Executor": "execution", "Features": "values", "GatewayClient": "client",
        "GatewayCore": "core", "GatewaySettings": "config", "InprocEngines": "adapters.inproc",
        "InprocLibrary": "adapters.inproc", "LOCAL_TENANT": "auth", "Limits": "core",
        "PROMOTION_COUNTERS": "speculation.promotion",
        "PredictionContext": "speculation.predictors", "REFUSALS": "speculation.state",
        "Router": "adapters.router",
        "ShardedLibrary": "adapters.sharded_library", "StageService": "stages",
        "TITLE_WEIGHT": "speculation.titles", "TemplateRegistry": "templates",
        "Window": "templates",
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
