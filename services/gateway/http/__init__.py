"""The gateway's HTTP front (DESIGN.md §3 gateway): the Starlette app (``front``), the one
arrival every protocol parses into and the demand it becomes (``arrival``), the protocols
(``wires``: OpenAI chat and completions in ``schema``, ``chat``, ``bodies`` and ``stream``; the
Responses API in ``responses``; Anthropic's Messages API in ``messages``).

An edge, like the gRPC servicer: may import ``core``, ``auth``, ``values`` and below; nothing in
the gateway imports it except ``server``.
"""
