"""Byte layouts of what the library keeps in LMDB.

Entry (sub-database ``entries``): key = incarnation id as big-endian u64, value::

    cost_s f64 | stored_seq u64 | flags u8 | key_len u16 | n_reads u32 | n_producers u32
    | name key | n_reads x (len u16 | record_id UTF-8 | version u64) | n_producers x (eid u64)
    | result

Keying by incarnation id rather than by name means a key is never reused, so a lookup that found
the id in memory can trust whatever value LMDB returns for it; ids grow, so new entries append
at the right edge of the B-tree and a cascade's deletes are clustered. The result comes last so a
hit is one slice. Version key (sub-database ``versions``): ``len u16 | tenant | record_id``,
value ``u64``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from services.common.values.reads import RecordKey, RecordRead

_HEAD = struct.Struct(">dQBHII")
_READ_LEN = struct.Struct(">H")
_U64 = struct.Struct(">Q")
_COMPLETE = 0x01


@dataclass(frozen=True, slots=True)
class StoredEntry:
    """An entry value decoded at start-up."""

    key: bytes
    eid: int
    cost_s: float
    stored_seq: int
    complete: bool
    reads: tuple[RecordRead, ...]
    producers: tuple[int, ...]
    result_offset: int
    size: int


def eid_key(eid: int) -> bytes:
    """LMDB key of an incarnation."""
    return _U64.pack(eid)


def encode_entry(
    key: bytes, cost_s: float, stored_seq: int, complete: bool,
    reads: tuple[RecordRead, ...], producers: tuple[int, ...], result: bytes,
) -> tuple[bytes, int]:
    """Encode an entry value for name key ``key``; return it and the result's offset in it."""
    parts = [_HEAD.pack(cost_s, stored_seq, _COMPLETE if complete else 0, len(key),
                        len(reads), len(producers)), key]
    for read in reads:
        rid = read.record_id.encode()
        parts += (_READ_LEN.pack(len(rid)), rid, _U64.pack(read.version))
    parts += [_U64.pack(p) for p in producers]
    head = b"".join(parts)
    return head + result, len(head)


def decode_entry(raw_eid: bytes, value: bytes) -> StoredEntry:
    """Decode an entry; raises ``ValueError``/``struct.error`` on malformed bytes."""
    eid = decode_u64(raw_eid)
    cost_s, stored_seq, flags, key_len, n_reads, n_prod = _HEAD.unpack_from(value)
    off = _HEAD.size + key_len
    key = value[_HEAD.size:off]
    reads = []
    for _ in range(n_reads):
        (n,) = _READ_LEN.unpack_from(value, off)
        rid = value[off + 2: off + 2 + n].decode()
        (version,) = _U64.unpack_from(value, off + 2 + n)
        reads.append(RecordRead(rid, version))
        off += 2 + n + 8
    producers = tuple(_U64.unpack_from(value, off + 8 * i)[0] for i in range(n_prod))
    off += 8 * n_prod
    if off > len(value):
        raise ValueError("entry value shorter than its header says")
    return StoredEntry(key, eid, cost_s, stored_seq, bool(flags & _COMPLETE), tuple(reads),
                       producers, off, len(raw_eid) + len(value))


def encode_record_key(key: RecordKey) -> bytes:
    """Versions-table key of a namespaced record."""
    tenant = key[0].encode()
    return _READ_LEN.pack(len(tenant)) + tenant + key[1].encode()


def decode_record_key(raw: bytes) -> RecordKey:
    """Inverse of :func:`encode_record_key`."""
    (n,) = _READ_LEN.unpack_from(raw)
    return raw[2:2 + n].decode(), raw[2 + n:].decode()


def encode_u64(value: int) -> bytes:
    """Big-endian u64."""
    return _U64.pack(value)


def decode_u64(raw: bytes) -> int:
    """Inverse of :func:`encode_u64`; raises on a wrong length."""
    if len(raw) != 8:
        raise ValueError(f"expected 8 bytes, got {len(raw)}")
    return int(_U64.unpack(raw)[0])


__all__ = [
    "StoredEntry", "decode_entry", "decode_record_key", "decode_u64", "eid_key", "encode_entry",
    "encode_record_key", "encode_u64",
]
