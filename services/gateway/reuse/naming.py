"""The reuse name of a stage (C1's identity rule, dynbranch §3.2, DESIGN.md §5.1).

A name is the tenant, the stage's fingerprint and its rendered input: equal demands share it,
tenants never do (unless the stage is shared), and only deterministic stages have one (greedy
or seeded sampling, read-only tools). A tool stage's fingerprint names its tool's incarnation
(``Tool.identity``), so a rebuilt corpus never answers with an older one's results. The
canonical path names demands (``demand_name``); speculation names the steps a fill would run
(``fingerprint`` and ``name_for``), so that a demand for one matches it exactly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from services.common.values.generation import Sampling
from services.common.values.reuse_name import ReuseName, StageFingerprint, reuse_name
from services.gateway.templates import Stage, StageKind, TemplateRegistry
from services.gateway.tools.base import Tool
from services.gateway.values import Demand, Features


class Naming:
    """Resolves demands to their template stage and names them (module docstring)."""

    def __init__(self, *, registry: TemplateRegistry, tools: Mapping[str, Tool],
                 features: Features) -> None:
        self.registry = registry
        self.tools = dict(tools)
        self.features = features

    def resolved(self, d: Demand) -> Demand:
        """``d`` with the template stage it names (``NotFound`` for an unknown one); ``d``
        itself when untagged or already resolved, so a demand is resolved once."""
        if not d.tagged or d.stage is not None:
            return d
        return dataclasses.replace(d, stage=self.registry.get(d.template_id).stage(d.stage_id))

    def named(self, d: Demand) -> tuple[Demand, ReuseName | None]:
        """``d`` resolved (``resolved``) and its reuse name (``demand_name``): a canonical
        demand's first step."""
        d = self.resolved(d)
        return d, self.demand_name(d)

    def fingerprint(self, template_id: str, stage_id: str, stage_version: int, model: str,
                    sampling: Sampling | None, stage: Stage | None) -> StageFingerprint:
        """The fingerprint of a stage; tool stages name their tool's incarnation as model."""
        if stage is not None and stage.kind is StageKind.TOOL:
            tool = self.tools.get(stage.tool)
            identity = tool.identity if tool is not None else f"tool:{stage.tool}"
            return StageFingerprint(template_id, stage_id, stage_version, identity)
        assert sampling is not None
        return StageFingerprint(template_id, stage_id, stage_version, model,
                                temperature=sampling.temperature, top_p=sampling.top_p,
                                top_k=sampling.top_k, seed=sampling.seed,
                                max_tokens=sampling.max_tokens, stop=sampling.stop,
                                ignore_eos=sampling.ignore_eos)

    def name_for(self, tenant: str, fingerprint: StageFingerprint, data: bytes,
                 stage: Stage | None, sampling: Sampling | None) -> ReuseName | None:
        """The reuse name, or None when the stage may not be reused (non-deterministic)."""
        if stage is not None and stage.kind is StageKind.TOOL:
            if not stage.read_only:
                return None
        elif sampling is None or not sampling.deterministic:
            return None
        return reuse_name(tenant, fingerprint, data, shared=bool(stage and stage.shared))

    def demand_name(self, d: Demand) -> ReuseName | None:
        """The reuse name of a canonical demand (resolved: its ``stage`` is set when it names
        one), when C1 or C2 is on."""
        if not (self.features.c1 or self.features.c2):
            return None
        fp = self.fingerprint(d.template_id, d.stage_id, d.stage_version, d.model, d.sampling,
                              d.stage)
        data = d.prompt.encode()
        if d.chat is not None:  # tools, tool choice and response format change the output too
            data += b"\x00" + d.chat.name_bytes()
        return self.name_for(d.tenant, fp, data, d.stage, d.sampling)


__all__ = ["Naming"]
