"""The csl's on-disk encoding (``codec``): entries, record keys and u64s round-trip, and
malformed bytes are refused rather than misread."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.common.values.reads import RecordRead
from services.csl import codec

reads = st.lists(st.builds(RecordRead, st.text(min_size=1, max_size=40),
                           st.integers(0, 2**64 - 1)), max_size=5).map(tuple)


@given(key=st.binary(min_size=1, max_size=64), cost=st.floats(0, 1e6), seq=st.integers(0, 2**63),
       complete=st.booleans(), rs=reads, producers=st.lists(st.integers(0, 2**64 - 1),
                                                            max_size=4).map(tuple),
       result=st.binary(max_size=200))
def test_an_entry_round_trips(key: bytes, cost: float, seq: int, complete: bool,
                              rs: tuple[RecordRead, ...], producers: tuple[int, ...],
                              result: bytes) -> None:
    value, offset = codec.encode_entry(key, cost, seq, complete, rs, producers, result)
    stored = codec.decode_entry(codec.eid_key(7), value)
    assert (stored.key, stored.eid, stored.cost_s, stored.stored_seq, stored.complete) == \
        (key, 7, cost, seq, complete)
    assert stored.reads == rs and stored.producers == producers
    assert stored.result_offset == offset and value[offset:] == result


def test_record_keys_and_u64s_round_trip_and_bad_bytes_are_refused() -> None:
    for key in (("", "corpus/doc/1"), ("tenant-a", "x")):
        assert codec.decode_record_key(codec.encode_record_key(key)) == key
    assert codec.decode_u64(codec.encode_u64(2**64 - 1)) == 2**64 - 1
    with pytest.raises(ValueError, match="expected 8 bytes"):
        codec.decode_u64(b"\x00" * 7)
    value, _ = codec.encode_entry(b"k", 1.0, 1, True, (RecordRead("r", 1),), (3,), b"")
    with pytest.raises((ValueError, Exception)):
        codec.decode_entry(codec.eid_key(1), value[:-4])  # cut inside the producers
