"""ULIDs: 26 Crockford base32 characters whose first ten carry the millisecond time,
so ids sort by creation time across milliseconds; the rest is random."""

from __future__ import annotations

import time

from trunkline.protocol import ids

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def decode(ulid: str) -> int:
    value = 0
    for ch in ulid:
        value = value * 32 + CROCKFORD.index(ch)
    return value


def test_a_ulid_carries_the_time_and_random_bits_in_crockford_base32():
    before = int(time.time() * 1000)
    u = ids.ulid()
    after = int(time.time() * 1000)
    assert len(u) == 26 and set(u) <= set(CROCKFORD)
    assert before <= decode(u) >> 80 <= after
    assert len({ids.ulid() for _ in range(10_000)}) == 10_000


def test_ulids_sort_by_time_and_carry_their_prefixes(monkeypatch):
    clock = iter([1_700_000_000.000, 1_700_000_000.001, 1_700_000_000.002])
    monkeypatch.setattr(ids.time, "time", lambda: next(clock))
    made = [ids.ulid() for _ in range(3)]
    assert made == sorted(made) and len(set(made)) == 3
    monkeypatch.undo()
    assert ids.request_id().startswith("req_") and ids.tool_call_id().startswith("tu_")
