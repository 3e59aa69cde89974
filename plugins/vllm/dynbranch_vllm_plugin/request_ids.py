"""Which engine request ids are a client's own request id.

A client knows only the id it sent; vLLM renames it on the way to the engine core (0.32):

* ``AsyncLLM.add_request`` (``InputProcessor.assign_request_id``) appends ``-`` and 8 random hex
  characters, unless ``VLLM_DISABLE_REQUEST_ID_RANDOMIZATION`` is set;
* the OpenAI server's ``/v1/completions`` submits prompt *i* of a request as
  ``cmpl-{id}-{i}``, ``/v1/chat/completions`` a conversation as ``chatcmpl-{id}``, where ``id``
  is the ``X-Request-Id`` header if sent, else the body's ``request_id`` (vLLM's extension).

So the *names* of a client id ``R`` are ``R``, ``cmpl-R-0`` (one prompt) and ``chatcmpl-R``
(one conversation), and an engine id is one of ``R``'s requests iff it equals a name or a name
followed by ``-`` and 8 hex characters. The length check keeps ids apart that share a stem
(``cmpl-x-0-…`` of client ``x`` is not ``cmpl-x-0-0-…`` of client ``x-0``).
"""

from __future__ import annotations

#: How vLLM's OpenAI server and AsyncLLM name a client's request ``{}`` (the suffix aside).
SERVER_FORMS = ("{}", "cmpl-{}-0", "chatcmpl-{}")
#: Length of AsyncLLM's random suffix, after its ``-``.
SUFFIX_LEN = 8
_HEX = frozenset("0123456789abcdef")


def names(request_id: str) -> tuple[str, ...]:
    """The engine-side names a client's request id may take (suffix aside)."""
    return tuple(form.format(request_id) for form in SERVER_FORMS)


def stems(engine_id: str) -> tuple[str, ...]:
    """The names an engine request id answers to: itself, and itself without AsyncLLM's suffix."""
    cut = len(engine_id) - SUFFIX_LEN - 1
    if cut > 0 and engine_id[cut] == "-" and set(engine_id[cut + 1:]) <= _HEX:
        return engine_id, engine_id[:cut]
    return (engine_id,)


def is_request_of(engine_id: str, request_id: str) -> bool:
    """Whether ``engine_id`` is the engine's id of client request ``request_id``."""
    return not set(stems(engine_id)).isdisjoint(names(request_id))


__all__ = ["SERVER_FORMS", "SUFFIX_LEN", "is_request_of", "names", "stems"]
