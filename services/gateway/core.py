"""The gateway's composition root, protocol-free: demands in, answers out; templates, writes and
branch settlements. The gRPC servicer and the OpenAI-compatible HTTP front both call this."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import yaml

from services.common.errors import InvalidArgument, PayloadTooLarge
from services.gateway.branches import BranchManager
from services.gateway.demand import Answer, Demand
from services.gateway.ports import EnginePort, LibraryPort
from services.gateway.router import unknown_model
from services.gateway.stages import StageService
from services.gateway.templates import StageKind, Template, TemplateRegistry, parse_template
from services.gateway.tools.base import RecordVersion
from services.gateway.tools.corpus import Corpus, Document

#: Largest template document accepted.
MAX_TEMPLATE_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """Input bounds enforced on every demand."""

    max_prompt_bytes: int = 1024 * 1024
    max_request_id: int = 128
    max_map_entries: int = 256


class GatewayCore:
    """Everything the gateway does, behind the wire formats."""

    def __init__(self, *, registry: TemplateRegistry, stages: StageService,
                 branches: BranchManager | None, library: LibraryPort | None,
                 engines: EnginePort, corpus: Corpus | None, limits: Limits) -> None:
        self.registry = registry
        self.stages = stages
        self.branches = branches
        self.library = library
        self.engines = engines
        self.corpus = corpus
        self.limits = limits
        self._write_lock = asyncio.Lock()

    def check(self, d: Demand) -> None:
        """Refuse a malformed demand, naming the field."""
        if not d.prompt:
            raise InvalidArgument("demand.prompt", "required")
        if len(d.prompt.encode()) > self.limits.max_prompt_bytes:
            raise PayloadTooLarge("demand.prompt",
                                  f"larger than {self.limits.max_prompt_bytes} bytes")
        if len(d.request_id) > self.limits.max_request_id:
            raise InvalidArgument("demand.header.id",
                                  f"at most {self.limits.max_request_id} characters")
        if bool(d.template_id) != bool(d.stage_id):
            raise InvalidArgument("demand.stage_id" if d.template_id else "demand.template_id",
                                  "template_id and stage_id go together")
        for field, items in (("inputs", d.inputs), ("outputs", d.outputs),
                             ("offered", d.offered)):
            if len(items) > self.limits.max_map_entries:
                raise InvalidArgument(f"demand.{field}",
                                      f"at most {self.limits.max_map_entries} entries")
        stage = self.stages.stage_of(d)
        if stage is None or stage.kind is StageKind.LLM:
            self.check_model(d.model)
            if d.sampling is None:
                raise InvalidArgument("demand.sampling", "required for llm stages")

    def check_model(self, model: str) -> None:
        """Refuse a missing or unserved model, naming the field."""
        if not model:
            raise InvalidArgument("demand.model", "required")
        served = self.engines.models()
        if model not in served:
            raise unknown_model(model, served)

    def max_tokens_limit(self, model: str) -> int:
        """The largest ``max_tokens`` a demand on ``model`` may ask for."""
        return self.engines.max_model_len(model) or 1

    async def call(self, d: Demand, timeout_s: float,
                   on_delta: Callable[[str], None] | None = None) -> Answer:
        """Validate and answer one demand (``on_delta``: streamed text of an engine execution)."""
        self.check(d)
        return await self.stages.run(d, timeout_s, on_delta)

    def register_template(self, text: str) -> Template:
        """Parse and register a YAML template; errors name the template and the path."""
        if len(text.encode()) > MAX_TEMPLATE_BYTES:
            raise PayloadTooLarge("yaml", f"larger than {MAX_TEMPLATE_BYTES} bytes")
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InvalidArgument("yaml", f"not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise InvalidArgument("yaml", "must be a mapping (a template document)")
        return self.registry.register(parse_template(data))

    async def write(self, tenant: str, upserts: Sequence[Document], removals: Sequence[str],
                    record_ids: Sequence[str]) -> list[RecordVersion]:
        """Write corpus documents and other records; invalidate their readers in the library."""
        if (upserts or removals) and self.corpus is None:
            raise InvalidArgument("upserts", "this gateway has no retrieval corpus")
        if self.library is None:
            raise InvalidArgument("record_ids", "this gateway has no library to invalidate")
        async with self._write_lock:
            written: list[RecordVersion] = []
            if upserts or removals:
                written += await self._write_corpus(upserts, removals)
            if record_ids:
                versions = await self.library.write_records(tenant, record_ids)
                written += [RecordVersion(r, v) for r, v in zip(record_ids, versions, strict=True)]
            return written

    async def _write_corpus(self, upserts: Sequence[Document], removals: Sequence[str]
                            ) -> list[RecordVersion]:
        # Bump in the library first, then write the corpus with the library's versions: a search
        # in between reads old text at an old version and is refused as stale (tools/corpus.py).
        assert self.corpus is not None and self.library is not None
        ids = await asyncio.to_thread(self.corpus.plan_write, upserts, removals)
        versions = await self.library.write_records("", ids)
        assigned = dict(zip(ids, versions, strict=True))
        return list(await asyncio.to_thread(self.corpus.write_documents, upserts, removals,
                                            assigned))

    def settle(self, tenant: str, workflow_id: str, coordinate: str, selected: str) -> int:
        """Resolve a workflow's branch at ``coordinate`` with the harness's selection."""
        if not workflow_id:
            raise InvalidArgument("workflow_id", "required")
        self.registry.decision(coordinate)  # NotFound for an unknown coordinate
        if self.branches is None:
            return 0
        return self.branches.settle(tenant, workflow_id, coordinate, selected)

    async def close(self) -> None:
        """Stop branches and wait for stores."""
        if self.branches is not None:
            await self.branches.close()
        await self.stages.close()


__all__ = ["GatewayCore", "Limits"]
