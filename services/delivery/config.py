"""Delivery settings (env prefix ``DYNBRANCH_DELIVERY_``)."""

from __future__ import annotations

from typing import ClassVar

from services.common.config import ServiceSettings


class DeliverySettings(ServiceSettings):
    """Settings of the delivery service."""

    env_prefix: ClassVar[str] = "DYNBRANCH_DELIVERY_"


__all__ = ["DeliverySettings"]
