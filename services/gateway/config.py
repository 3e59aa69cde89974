"""Gateway settings (env prefix ``DYNBRANCH_GATEWAY_``)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from services.common.values.config import ServiceSettings


class GatewaySettings(ServiceSettings):
    """Settings of the gateway."""

    env_prefix: ClassVar[str] = "DYNBRANCH_GATEWAY_"

    engines: list[str] = Field(default_factory=list,
                               description="engine agent targets host:port (JSON list in env)")
    csl: str = Field("", description="csl target host:port; empty: no library (C1 and C2 off)")
    csl_shards: list[str] = Field(default_factory=list, description=(
        "csl shard targets host:port (a JSON list or a comma list in env), instead of csl: "
        "each reuse name lives on the shard rendezvous hashing picks; record writes reach every "
        "shard"))
    csl_serving_lease_s: float = Field(1.0, gt=0, le=600, description=(
        "sharded csl: the shards' serving lease (their serving_lease_s, at least): a record "
        "write some shard did not acknowledge waits this long, plus a drift margin, before it "
        "is acknowledged"))
    csl_renew_interval_s: float = Field(0.25, gt=0, le=600, description=(
        "sharded csl: how often this gateway renews each shard's serving lease from its peers "
        "(well below csl_serving_lease_s)"))
    admission: str = Field("", description="admission target; empty: in-process fixed policy")
    delivery: str = Field("", description=(
        "delivery target host:port for DeliverResult (LADS); empty: the gateway does not "
        "forward tool results"))
    c1: bool = Field(True, description="exact subgraph reuse on every demand")
    c2: bool = Field(True, description="early fill at decision points")
    top_k: int = Field(2, ge=0, le=64, description="in-process fixed policy: fills per branch")
    fill_wait_s: float = Field(1.0, ge=0, le=60, description=(
        "longest a demand waits for its branch to be opened (admission's answer), and for a "
        "fill another gateway replica runs; a fill running here is adopted instead (no cap: "
        "adopt_stall_s and adopt_check_s)"))
    adopt_stall_s: float = Field(5.0, gt=0, le=600, description=(
        "a demand adopting a running fill runs the stage anew once the fill produced no token "
        "for this long (a hung or thrashing engine)"))
    adopt_check_s: float = Field(0.05, gt=0, le=60, description=(
        "how often an adopting demand re-weighs waiting against running anew: a raised fill "
        "still queued after it, while an engine could start the stage now, is given up"))
    shadow_ttl_s: float = Field(60.0, gt=0, le=86_400, description="life of unclaimed shadows")
    fill_timeout_s: float = Field(120.0, gt=0, le=3600,
                                  description="deadline of one fill step on an engine (s)")
    predictor: Literal["lexical", "draft"] = Field("lexical", description=(
        "candidate predictor: lexical (template, offered and observed names, corpus titles) or "
        "draft (a small model served by an engine agent decodes the names; draft_model)"))
    overlap_weight: float = Field(2.0, ge=0, le=100, description=(
        "lexical predictor: weight of the word-overlap member (`dynbranch bench arms` sets the "
        "value fitted on the workload's training split)"))
    draft_model: str = Field("", description="draft predictor: the model an engine serves for it")
    draft_max_tokens: int = Field(24, ge=1, le=512, description="draft predictor: tokens decoded")
    draft_deadline_s: float = Field(1.0, gt=0, le=60, description=(
        "draft predictor: time box; at the deadline the draft yields nothing (still charged)"))
    branch_ttl_s: float = Field(300.0, gt=0, le=86_400, description="life of a branch record")
    templates: list[str] = Field(default_factory=list,
                                 description="extra template YAML files (built-ins always load)")
    corpus: str = Field("", description=(
        "corpus service target host:port: the mesh's one retrieval corpus, shared by every "
        "gateway (instead of corpus_path); empty: none"))
    corpus_deadline_s: float = Field(2.0, gt=0, le=60, description=(
        "deadline of a corpus service read (search, confirm, versions); writes take 10 s"))
    corpus_connect_timeout_s: float = Field(30.0, gt=0, le=600, description=(
        "wait this long at start for the corpus service to answer"))
    corpus_path: str = Field("", description=(
        "LMDB folder of a retrieval corpus this gateway opens itself (one process only: a mesh "
        "of several gateways shares the corpus service, corpus); empty: none"))
    corpus_source: str = Field("", description="data set loaded into an empty corpus_path "
                                               "(hotpotqa, musique, magento)")
    data_dir: str = Field("", description=(
        "folder of the shared data sets; empty: $DYNBRANCH_DATA_DIR, else ../shared/data"))
    api_keys: dict[str, str] = Field(default_factory=dict, description="API key → tenant")
    api_keys_file: str = Field("", description=(
        "YAML file of API key → tenant (a mounted Secret); replaces api_keys and is reloaded "
        "when it changes, without a restart"))
    auth: bool = Field(True, description="require an API key; switch off only for local use")
    http_port: int = Field(-1, ge=-1, le=65535,
                           description="OpenAI-compatible HTTP port; 0 picks one, -1 disables")
    http_header_timeout_s: float = Field(10.0, gt=0, le=600, description=(
        "HTTP: a request's headers must arrive within this long of its first byte (a new "
        "connection that sends nothing is closed after it too); past it 408 and closed"))
    http_body_timeout_s: float = Field(30.0, gt=0, le=3600, description=(
        "HTTP: a request's body must arrive within this long of its headers; past it 408"))
    http_keepalive_timeout_s: float = Field(65.0, gt=0, le=3600, description=(
        "HTTP: an idle keep-alive connection is closed after this long (above the 60 s idle "
        "timeout of common load balancers, so they close first)"))
    http_max_connections: int = Field(1024, ge=1, le=1_000_000, description=(
        "HTTP: connections open at once; one more is answered 503 with Retry-After and closed "
        "(keep it below the process's open-file limit)"))
    call_deadline_s: float = Field(120.0, gt=0, le=3600,
                                   description="deadline of a stage call when the caller sets none")
    engine_connect_timeout_s: float = Field(30.0, gt=0, le=600,
                                            description="wait this long for engines at start")
    max_prompt_bytes: int = Field(1024 * 1024, ge=1, description="largest prompt accepted")
    max_request_id: int = Field(128, ge=8, le=1024, description="longest request id accepted")
    max_in_flight: int = Field(4096, ge=1, le=1_000_000, description=(
        "stage demands answered at once (gRPC and HTTP together); one more is refused at once "
        "with RESOURCE_EXHAUSTED / HTTP 429, never queued"))
    max_pending_stores: int = Field(4096, ge=1, le=1_000_000, description=(
        "background library stores in flight; past it a result is answered but not stored "
        "(a missed reuse, counted), never queued"))
    max_branches: int = Field(10_000, ge=1, le=1_000_000, description=(
        "open branch records kept; opening one more retires the oldest (its fills aborted, its "
        "outcome reported)"))
    max_templates: int = Field(1024, ge=8, le=100_000, description=(
        "template versions registered (built-ins included); one more is refused with "
        "RESOURCE_EXHAUSTED"))

    @model_validator(mode="after")
    def _engines_given(self) -> GatewaySettings:
        if not self.engines:
            raise ValueError("engines: at least one engine agent target is required")
        return self

    @model_validator(mode="after")
    def _one_library(self) -> GatewaySettings:
        if self.csl and self.csl_shards:
            raise ValueError("csl and csl_shards: set one (a single library or its shards)")
        if len(set(self.csl_shards)) != len(self.csl_shards):
            raise ValueError("csl_shards: each shard target listed once")
        return self

    @model_validator(mode="after")
    def _one_corpus(self) -> GatewaySettings:
        if self.corpus and (self.corpus_path or self.corpus_source):
            raise ValueError("corpus and corpus_path/corpus_source: set one (the corpus "
                             "service, or a corpus this gateway opens; the service loads its "
                             "own source)")
        return self

    @field_validator("csl_shards", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        """A ConfigMap carries the shard list as ``a:1,b:2``; JSON lists pass through."""
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @model_validator(mode="after")
    def _draft_model_when_drafting(self) -> GatewaySettings:
        if self.predictor == "draft" and not self.draft_model:
            raise ValueError("draft_model: required by predictor: draft")
        return self

    @model_validator(mode="after")
    def _keys_when_auth(self) -> GatewaySettings:
        if self.auth and not (self.api_keys or self.api_keys_file):
            raise ValueError("auth is on but api_keys is empty: configure api_keys "
                             "(key: tenant) or api_keys_file, or set auth: false for local use")
        return self


__all__ = ["GatewaySettings"]
