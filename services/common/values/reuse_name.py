"""Exact reuse names for completed stage results (dynbranch §3.2, Lemma A.1).

A reuse name is the tenant namespace plus a collision-resistant digest over the stage
fingerprint and the complete rendered input. Two executions share a name exactly when every
result-determining field is equal, so (with the freshness guard on dependency versions) a hit
replays one recorded execution.

The digest is BLAKE2b-256 over a canonical, length-prefixed encoding: every field is written as
``tag (1 byte) | length (8 bytes, big-endian) | payload`` in a fixed order, so no two distinct
field tuples encode to the same byte string (no separator or JSON ambiguity), and nothing depends
on Python's per-process ``hash()`` randomisation. Floats are encoded as IEEE-754 binary64 after
folding ``-0.0`` into ``0.0``; callers must pass the float values that are actually sent to the
engine (a proto ``float`` field is binary32, so 0.7 read from a proto is 0.699999988...).

The gateway derives names for canonical demands and for fills with :func:`reuse_name`; the CSL
treats names as opaque.
"""

from __future__ import annotations

import functools
import hashlib
import math
import struct
from dataclasses import dataclass
from typing import Any

from services.common.values.errors import InvalidArgument

#: Bumped whenever the encoding changes; part of every digest, so old and new names never mix.
SCHEME = b"dynbranch/reuse-name/v1"
DIGEST_BYTES = 32
DIGEST_HEX_LEN = DIGEST_BYTES * 2
#: Tenant ids are short API-key-derived names; the bound keeps LMDB keys under 511 bytes.
MAX_TENANT_BYTES = 256

_LEN = struct.Struct(">Q")
_F64 = struct.Struct(">d")
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True, slots=True)
class StageFingerprint:
    """Everything about a stage, other than its rendered input, that can change its output."""

    template_id: str
    stage_id: str
    stage_version: int
    model: str
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    max_tokens: int = 0
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.stop, tuple):
            raise InvalidArgument("stop", "must be a tuple of strings")
        for name in ("temperature", "top_p"):
            if not math.isfinite(getattr(self, name)):
                raise InvalidArgument(name, "must be finite")
        if self.stage_version < 0:
            raise InvalidArgument("stage_version", "must be >= 0")

    @classmethod
    def from_demand(cls, demand: Any) -> StageFingerprint:
        """The fingerprint of a ``dynbranch.v1.StageDemand`` (values exactly as on the wire)."""
        s = demand.sampling
        return cls(
            template_id=demand.template_id, stage_id=demand.stage_id,
            stage_version=demand.stage_version, model=demand.model,
            temperature=s.temperature, top_p=s.top_p, top_k=s.top_k,
            seed=s.seed if s.HasField("seed") else None, max_tokens=s.max_tokens,
            stop=tuple(s.stop), ignore_eos=s.ignore_eos,
        )


@dataclass(frozen=True, slots=True)
class ReuseName:
    """An exact reuse name: tenant namespace ("" for shared stages) and lower-case hex digest."""

    tenant: str
    digest: str

    def __post_init__(self) -> None:
        validate_name(self.tenant, self.digest)

    def __str__(self) -> str:
        return f"{self.tenant or '<shared>'}/{self.digest}"


def validate_name(tenant: str, digest: str, field: str = "name") -> None:
    """Raise ``InvalidArgument`` unless ``(tenant, digest)`` is a well-formed reuse name."""
    if len(digest) != DIGEST_HEX_LEN or not _HEX.issuperset(digest):
        raise InvalidArgument(f"{field}.digest", f"must be {DIGEST_HEX_LEN} lower-case hex digits")
    validate_tenant(tenant, f"{field}.tenant")


def validate_tenant(tenant: str, field: str = "tenant") -> None:
    """Raise ``InvalidArgument`` when a tenant namespace is too long to key a store."""
    if len(tenant) > MAX_TENANT_BYTES // 4 and len(tenant.encode()) > MAX_TENANT_BYTES:
        raise InvalidArgument(field, f"longer than {MAX_TENANT_BYTES} bytes")


def reuse_name(
    tenant: str, fingerprint: StageFingerprint, rendered_input: bytes, shared: bool = False
) -> ReuseName:
    """Derive the reuse name of a stage execution (dynbranch §3.2).

    ``tenant`` is the caller's namespace; it is part of the digest unless the stage is declared
    ``shared``, in which case the name lives in the shared namespace ``""`` and any tenant that
    renders the same input under the same fingerprint derives the same name.
    """
    if not shared and not tenant:
        raise InvalidArgument("tenant", "required unless the stage is declared shared")
    if not isinstance(rendered_input, bytes | bytearray | memoryview):
        raise InvalidArgument("rendered_input", "must be bytes")
    namespace = "" if shared else tenant
    # One buffer, one update: the same byte stream as field-by-field updates, at a third of the
    # cost (this runs on every demand).
    parts = [_field(b"V", SCHEME), _field(b"N", b"\x01" if shared else b"\x00"),
             _field(b"t", namespace.encode()), _fingerprint_bytes(fingerprint),
             _field(b"q", bytes(rendered_input))]
    h = hashlib.blake2b(b"".join(parts), digest_size=DIGEST_BYTES, person=b"dynbranch-csl")
    return ReuseName(namespace, h.hexdigest())


@functools.lru_cache(maxsize=4096)
def _fingerprint_bytes(fp: StageFingerprint) -> bytes:
    """The encoded fingerprint; a workload has few distinct stages, so this is mostly a hit."""
    return b"".join(_fingerprint_fields(fp))


def _fingerprint_fields(fp: StageFingerprint) -> list[bytes]:
    fields = [
        _field(b"T", fp.template_id.encode()), _field(b"S", fp.stage_id.encode()),
        _field(b"v", _int(fp.stage_version)), _field(b"M", fp.model.encode()),
        _field(b"f", _float(fp.temperature)), _field(b"p", _float(fp.top_p)),
        _field(b"k", _int(fp.top_k)),
        _field(b"s", b"" if fp.seed is None else b"\x01" + _int(fp.seed)),
        _field(b"m", _int(fp.max_tokens)), _field(b"L", _int(len(fp.stop)))]
    # order kept: engines may report the first listed stop that matches
    fields += [_field(b"l", stop.encode()) for stop in fp.stop]
    fields.append(_field(b"e", b"\x01" if fp.ignore_eos else b"\x00"))
    return fields


def _field(tag: bytes, payload: bytes) -> bytes:
    """``tag | length (8 bytes, big-endian) | payload``."""
    return tag + _LEN.pack(len(payload)) + payload


def _int(value: int) -> bytes:
    # Signed, minimal two's-complement: distinct integers always give distinct bytes.
    return int(value).to_bytes((int(value).bit_length() + 8) // 8, "big", signed=True)


def _float(value: float) -> bytes:
    return _F64.pack(float(value) + 0.0)  # + 0.0 folds -0.0 into 0.0


def name_key(name: ReuseName) -> bytes:
    """LMDB key of a name: UTF-8 tenant followed by the 64 hex digits of the digest.

    Unambiguous because the digest has a fixed length; one concatenation keeps it cheap on
    the lookup path.
    """
    return (name.tenant + name.digest).encode()


__all__ = [
    "DIGEST_HEX_LEN", "ReuseName", "StageFingerprint", "name_key", "reuse_name", "validate_name",
    "validate_tenant",
]
