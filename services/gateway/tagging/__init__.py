"""Workflow tags for harnesses that talk to the gateway's HTTP front through the official
``openai`` or ``anthropic`` clients (or any ``httpx`` client): set them for a block of code,
``with tagged(workflow_type=..., workflow_id=...)``, and a request hook or transport
(``transport``) sends them as the ``x-dynbranch-*`` headers of every request made in it.

- ``context``: the tags in a context variable (``tagged``, ``current_tags``): they nest and
  follow asyncio tasks.
- ``transport``: ``httpx`` hooks (``tag_request``, ``atag_request``), transports
  (``TaggingTransport``, ``AsyncTaggingTransport``) and ready clients (``tagging_client``,
  ``async_tagging_client``); a header the caller set is never overwritten.
- ``langgraph``: ``LangGraphTagger``, a LangChain callback handler that tags each LangGraph
  node's calls with the graph's thread (or run) id and the node's stage (needs
  ``langchain-core``; imported only from that module).
"""

from services.gateway.tagging.context import Tags, current_tags, tagged
from services.gateway.tagging.transport import (
    AsyncTaggingTransport,
    TaggingTransport,
    add_tags,
    async_tagging_client,
    atag_request,
    tag_request,
    tagging_client,
)

__all__ = ["AsyncTaggingTransport", "Tags", "TaggingTransport", "add_tags",
           "async_tagging_client", "atag_request", "current_tags", "tag_request", "tagged",
           "tagging_client"]
