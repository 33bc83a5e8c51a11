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


def test_terminal_frames_count_against_the_budget_and_the_oldest_go_whole():
    """A flood of large responses must not be kept for `keep_s`: once only terminal
    frames are left and they pass the budget, the oldest are let go entirely (replay
    then says unknown); the newest always stays."""
    table = RequestTable(ring_events=1000, keep_s=300, max_ended=10_000, max_bytes=10_000)
    states = []
    for i in range(6):
        state = RequestState(f"r{i}", "c1", "mock", "mock:echo", True, f"r{i}", table.ring_events, 0.0)
        table.add(state)
        state.ring.extend([b"c1\x00delta", b"c1\x00" + b"T" * 4000])
        state.last_seq = 1
        table.end(state, float(i))
        states.append(state)
    kept = [s for s in states if s.ring]
    assert table.ended_bytes <= table.max_bytes
    assert states[-1].ring and not states[0].ring
    assert all(list(s.ring) == [b"c1\x00" + b"T" * 4000] for s in kept[:-1])
    assert table.get("r0") is states[0]  # still remembered: a repeated submit is recognised
    huge = RequestState("huge", "c1", "mock", "mock:echo", True, "huge", table.ring_events, 0.0)
    table.add(huge)
    huge.ring.append(b"c1\x00" + b"H" * 50_000)  # larger than the whole budget
    table.end(huge, 7.0)
    assert len(huge.ring) == 1  # the newest terminal stays, whatever its size
    assert table.ended_bytes == len(huge.ring[0]) + FRAME_OVERHEAD


def test_a_running_request_keeps_a_bounded_ring_and_always_its_last_frame():
    state = RequestState("r", "c1", "mock", "mock:echo", True, "r", 100, 0.0)
    for _ in range(1000):
        state.keep([b"c1\x00" + b"d" * 996] * 3, max_bytes=16_000)
    assert state.ring_bytes == sum(map(len, state.ring)) <= 16_000
    assert len(state.ring) == 16
    state.keep([b"c1\x00" + b"x" * 100_000], max_bytes=16_000)
    assert list(state.ring) == [b"c1\x00" + b"x" * 100_000] and state.ring_bytes == 100_003
    for _ in range(150):  # the count bound (100) alone, every frame small
        state.keep([b"c1\x00e"], max_bytes=16_000)
    assert len(state.ring) == 100 and state.ring_bytes == 400


def test_each_connection_s_running_requests_and_bytes_are_counted_until_they_end():
    table = RequestTable(ring_events=10, keep_s=300, max_ended=100)
    a = [RequestState(f"a{i}", "c1", "mock", "m", True, f"a{i}", 10, 0.0, owner=1, size=100) for i in range(3)]
    b = RequestState("b", "c2", "mock", "m", True, "b", 10, 0.0, owner=2, size=7)
    for state in (*a, b):
        table.add(state)
    assert table.load_of(1) == (3, 300) and table.load_of(2) == (1, 7) and table.load_of(3) == (0, 0)
    table.end(a[0], 1.0)
    table.discard(a[1])  # a submit that failed after it was added
    assert table.load_of(1) == (1, 100)
    table.end(a[2], 2.0)
    table.end(a[2], 2.0)  # ending twice counts once
    assert table.load_of(1) == (0, 0) and 1 not in table.load


def test_each_providers_running_requests_are_listed_and_counted_until_they_end():
    table = RequestTable(ring_events=10, keep_s=300, max_ended=100)
    states = [
        RequestState(rid, "c1", provider, "m", True, rid, 10, 0.0)
        for rid, provider in zip("abc", ("mock", "mock", "other"), strict=True)
    ]
    for state in states:
        table.add(state)
    assert [s.request_id for s in table.of_provider("mock")] == ["a", "b"] and table.count_of("mock") == 2
    assert [s.request_id for s in table.of_provider("other")] == ["c"] and table.count_of("other") == 1
    assert table.of_provider("nobody") == [] and table.count_of("nobody") == 0
    table.end(states[0], 1.0)
    table.end(states[0], 1.0)  # ending twice counts once
    table.discard(states[2])  # a submit that failed after it was added
    assert [s.request_id for s in table.of_provider("mock")] == ["b"] and table.count_of("mock") == 1
    assert table.of_provider("other") == [] and table.count_of("other") == 0
