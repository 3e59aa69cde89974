"""Tags for a LangGraph (or any LangChain) run, derived from the run itself, so the graph's
node functions stay as they are:

    tagger = LangGraphTagger("routing")
    await graph.ainvoke(state, {"callbacks": [tagger], "configurable": {"thread_id": "t-1"}})

While a node runs, the current tags (``context.current_tags``) name the workflow by the graph's
thread id (``config["configurable"]["thread_id"]``; without one, the id of the graph's run) and
the stage by the node (``metadata["langgraph_node"]``): ``{workflow_type}/{node}`` (name the
nodes after the template's stages) or what ``stages`` maps the node to. Any HTTP client with a
tagging hook or transport (``transport``) then sends them with each model call the node makes,
through LangChain's chat models or an SDK client alike. Fields an enclosing ``tagged`` block
sets win over derived ones, and a header set on the request wins over both.

How: LangChain keeps the running node's config (its metadata, and its callbacks with the node's
run id) in a context variable that LangGraph sets for the node's code alone; this module's tag
source reads it when a request is tagged, and the handler, in that config's callbacks, knows the
run tree (for the graph run's id). Nothing is set in a context, so nothing can leak out of a
node, and parallel nodes never see each other's tags. Needs ``langchain-core`` (it comes with
``langgraph`` and ``langchain-openai``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
from langchain_core.runnables.config import var_child_runnable_config

from services.gateway.tagging.context import Tags, add_source

#: How a node's stage is found: a map from node name to ``template_id/stage_id`` (a node it
#: does not name gets no stage), or a function returning one (or None: no stage).
StageMap = Mapping[str, str] | Callable[[str], str | None]


class LangGraphTagger(BaseCallbackHandler):
    """Tags each LangGraph node's requests while it runs (pass it in the run's ``callbacks``).
    ``workflow_type``: the template (else the enclosing ``tagged`` block's); ``stages``: node
    -> stage, default ``{workflow_type}/{node}``; ``workflow_id`` and ``agent_id``: fixed
    values instead of the thread or run id, and none."""

    run_inline = True  # bookkeeping only: no executor hop per run

    def __init__(self, workflow_type: str | None = None, *, stages: StageMap | None = None,
                 workflow_id: str | None = None, agent_id: str | None = None) -> None:
        super().__init__()
        self.workflow_type = workflow_type or ""
        self.stages = stages
        self.workflow_id = workflow_id or ""
        self.agent_id = agent_id or ""
        self._lock = threading.Lock()
        self._parents: dict[UUID, UUID | None] = {}

    def stage_of(self, node: str, workflow_type: str) -> str:
        """The stage a node's requests are tagged with ("" for none)."""
        if self.stages is None:
            return f"{workflow_type}/{node}" if workflow_type else ""
        stage = self.stages(node) if callable(self.stages) else self.stages.get(node)
        return stage or ""

    def root_of(self, run_id: UUID) -> UUID:
        """The outermost run this handler saw above ``run_id`` (the graph's own run)."""
        with self._lock:
            while (parent := self._parents.get(run_id)) is not None and parent in self._parents:
                run_id = parent
        return run_id

    def fill(self, explicit: Tags, node: str, metadata: Mapping[str, Any],
             run_id: UUID | None) -> Tags:
        """``explicit`` with the node's tags in its empty fields (``run_id``: the run the
        request is made under, for the graph run's id when there is no thread id)."""
        workflow_type = explicit.workflow_type or self.workflow_type
        thread = metadata.get("thread_id")
        workflow_id = (self.workflow_id or (str(thread) if thread not in (None, "") else "")
                       or (str(self.root_of(run_id)) if run_id is not None else ""))
        return explicit.filled(workflow_type=workflow_type, workflow_id=workflow_id,
                               agent_id=self.agent_id,
                               stage=self.stage_of(node, workflow_type))

    # -- the run tree -------------------------------------------------------------------------

    def on_chain_start(self, serialized: dict[str, Any] | None, inputs: Any, *, run_id: UUID,
                       parent_run_id: UUID | None = None, tags: list[str] | None = None,
                       metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        with self._lock:
            self._parents[run_id] = parent_run_id

    def on_chain_end(self, outputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None,
                     **kwargs: Any) -> None:
        self._forget(run_id)

    def on_chain_error(self, error: BaseException, *, run_id: UUID,
                       parent_run_id: UUID | None = None, **kwargs: Any) -> None:
        self._forget(run_id)

    def _forget(self, run_id: UUID) -> None:
        with self._lock:
            self._parents.pop(run_id, None)

    @property
    def open_runs(self) -> int:
        """Runs started and not yet ended (0 once every run it saw is over)."""
        with self._lock:
            return len(self._parents)


def graph_tags(explicit: Tags) -> Tags:
    """The tag source: inside a LangGraph node run with a ``LangGraphTagger`` in its
    callbacks, ``explicit`` filled in by that tagger; anywhere else ``explicit`` itself."""
    config = var_child_runnable_config.get()
    if not config:
        return explicit
    metadata = config.get("metadata") or {}
    node = metadata.get("langgraph_node")
    if not isinstance(node, str) or not node:
        return explicit
    callbacks = config.get("callbacks")
    if isinstance(callbacks, BaseCallbackManager):
        handlers, run_id = callbacks.handlers, callbacks.parent_run_id
    else:
        handlers, run_id = list(callbacks or ()), None
    tagger = next((h for h in handlers if isinstance(h, LangGraphTagger)), None)
    if tagger is None:
        return explicit
    return tagger.fill(explicit, node, metadata, run_id)


add_source(graph_tags)

__all__ = ["LangGraphTagger", "StageMap", "graph_tags"]
