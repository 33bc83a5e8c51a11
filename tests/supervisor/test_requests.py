"""The request table: finished requests' events share one byte budget, the oldest let
go first, while the requests themselves are remembered (for duplicate submits) until
they expire; nothing it lets go of stays referenced."""

from __future__ import annotations

from trunkline.supervisor.requests import FRAME_OVERHEAD, RequestState, RequestTable


def finished(table: RequestTable, i: int, frames: int, size: int, now: float) -> RequestState:
    state = RequestState(f"r{i}", "c1", "mock", "mock:echo", True, f"r{i}", table.ring_events, now)
    table.add(state)
    state.ring.extend(b"c1\x00" + b"x" * (size - 3) for _ in range(frames))
    state.last_seq = frames - 1
    table.end(state, now)
    return state


def test_the_oldest_rings_go_first_when_the_budget_is_spent_and_the_requests_are_still_known():
    per_request = 10 * (100 + FRAME_OVERHEAD)
    table = RequestTable(ring_events=1000, keep_s=300, max_ended=10_000, max_bytes=5 * per_request)
    states = [finished(table, i, frames=10, size=100, now=float(i)) for i in range(8)]
    # Each evicted ring keeps its terminal frame, which counts: a fourth ring goes too.
    assert [s.evicted for s in states] == [True] * 4 + [False] * 4
    assert table.ended_bytes == 4 * per_request + 4 * (100 + FRAME_OVERHEAD) <= table.max_bytes
    assert all(len(s.ring) == 10 for s in states[4:])
    assert table.get("r0") is states[0]  # still known: a repeated submit is recognised


def test_an_evicted_ring_keeps_its_terminal_frame_for_replay():
    """The terminal event carries the whole (billed) response: replay can always give
    it, with a first_seq that tells the client which deltas are gone."""
    table = RequestTable(ring_events=1000, keep_s=300, max_ended=10_000, max_bytes=1000)
    big = RequestState("big", "c1", "mock", "mock:echo", True, "big", table.ring_events, 0.0)
    table.add(big)
    big.ring.extend([b"c1\x00delta" * 100] * 5 + [b"c1\x00terminal"])
    big.last_seq = 5
    table.end(big, 0.0)
    assert big.evicted and list(big.ring) == [b"c1\x00terminal"]
    assert big.first_seq == big.last_seq == 5
    assert big.frames_from(0, 5000) == [b"c1\x00terminal"]
    assert table.ended_bytes == len(b"c1\x00terminal") + FRAME_OVERHEAD
    assert table.expire(now=301.0) == 1 and table.ended_bytes == 0  # keep_s still ends it


def test_expiry_and_the_count_limit_forget_requests_and_release_their_rings():
    table = RequestTable(ring_events=1000, keep_s=10, max_ended=4, max_bytes=1 << 30)
    for i in range(6):
        finished(table, i, frames=3, size=50, now=float(i))
    assert sorted(table.ended) == ["r2", "r3", "r4", "r5"]
    assert table.ended_bytes == 4 * 3 * (50 + FRAME_OVERHEAD)
    assert table.expire(now=13.5) == 2  # r2 and r3 ended more than 10 s before
    assert sorted(table.ended) == ["r4", "r5"]
    assert table.ended_bytes == 2 * 3 * (50 + FRAME_OVERHEAD)
    assert len(table._rings) == 2  # nothing forgotten is still held


def test_a_long_run_holds_no_more_than_its_limits():
    table = RequestTable(ring_events=1000, keep_s=1e9, max_ended=500, max_bytes=200_000)
    for i in range(20_000):
        finished(table, i, frames=20, size=120, now=float(i))
        if i % 100 == 0:
            table.expire(float(i))
    assert len(table.ended) == 500
    assert table.ended_bytes <= 200_000
    assert len(table._rings) <= 500
