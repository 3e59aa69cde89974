"""Documents that say which write they are: what every freshness check rewrites and retrieves.

A document's text at version ``v`` carries one token only that version holds (``marker{v}x``),
and its length changes with the version, so a rewrite bumps the document's term records too,
not only its document record. A retrieve answer is then read back for the version it shows.
"""

from __future__ import annotations


def text_of(term: str, version: int) -> str:
    """A document's text at ``version``."""
    return f"{term} is a rewritten document. " + "body " * (version % 3) + f"marker{version}x."


def version_in(answer: str, term: str) -> int | None:
    """The marker version of ``term``'s passage in a retrieve answer (None when absent)."""
    for passage in answer.split("\n\n"):
        head, _, body = passage.partition("\n")
        if head.endswith(f"] {term}") and "marker" in body:
            return int(body.rsplit("marker", 1)[1].split("x", 1)[0])
    return None


__all__ = ["text_of", "version_in"]
