"""The OpenAI-compatible HTTP front (DESIGN.md §3 gateway): the Starlette app (``front``), SSE
streaming (``stream``), response bodies (``bodies``) and request schemas (``schema``).

An edge, like the gRPC servicer: may import ``core``, ``auth``, ``values`` and below; nothing in
the gateway imports it except ``server``.
"""
