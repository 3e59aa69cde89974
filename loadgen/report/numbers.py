"""Numbers as the report writes them: a value that rounds to zero prints as zero, never as
``-0.00`` (a tiny negative share or difference is no sign worth reading)."""

from __future__ import annotations


def fixed(value: float, digits: int, *, sign: bool = False) -> str:
    """``value`` to ``digits`` decimals (``sign``: always signed, zero as ``+0.00``)."""
    rounded = round(value, digits)
    if rounded == 0:
        rounded = 0.0  # -0.0 too
    return f"{rounded:{'+' if sign else ''}.{digits}f}"


def signed(value: float, digits: int = 3) -> str:
    """``value`` signed to ``digits`` decimals: ``+0.012``, ``-0.300``, ``+0.000``."""
    return fixed(value, digits, sign=True)


def percent(share: float, digits: int = 0, *, sign: bool = False) -> str:
    """``share`` as a percentage: ``0.123`` → ``12%`` (``-0%`` never)."""
    return fixed(100 * share, digits, sign=sign) + "%"


__all__ = ["fixed", "percent", "signed"]
