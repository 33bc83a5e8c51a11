"""What the memory store alone decides; the semantics both stores share are in
test_store_conformance.py."""

from __future__ import annotations

import calendar

from trunkline.supervisor.admission.memory import MemoryStore, day_end, day_of, month_end, month_of
from trunkline.supervisor.admission.store import Admitted, Limits, Refused, Settlement, Ticket


def test_budget_periods_end_on_utc_midnight_and_the_first_of_the_next_month() -> None:
    assert calendar.timegm((2027, 2, 1, 0, 0, 0)) == month_end(2027 * 12 + 0)  # January ends on Feb 1
    assert calendar.timegm((2028, 1, 1, 0, 0, 0)) == month_end(2027 * 12 + 11)  # December wraps the year
    last_second_of_2027 = calendar.timegm((2027, 12, 31, 23, 59, 59))
    assert month_of(last_second_of_2027) == 2027 * 12 + 11
    assert month_of(last_second_of_2027 + 1) == 2028 * 12 + 0
    assert day_end(day_of(last_second_of_2027)) == last_second_of_2027 + 1


def test_a_monthly_budget_outlives_the_day_and_resets_with_the_month() -> None:
    """A month's spend is kept across the days that turn within it (the memory store
    looks at the month only when the day turns)."""
    store = MemoryStore()
    limits = Limits(usd_per_month=2.0)
    t0 = float(calendar.timegm((2027, 12, 30, 12, 0, 0)))

    def ticket(rid: str, now: float) -> Ticket:
        return Ticket(request_id=rid, key="alice", key_limits=limits, candidates=(), tokens=0, now=now)

    assert isinstance(store.admit_now(ticket("a", t0)), Admitted)
    store.settle_now(Settlement("a", "alice", None, 0, 10, 2.5, t0))
    next_day = store.admit_now(ticket("b", t0 + 86400))
    assert isinstance(next_day, Refused) and next_day.error_class == "quota_exceeded"
    assert next_day.resets_at == calendar.timegm((2028, 1, 1, 0, 0, 0))
    assert isinstance(store.admit_now(ticket("c", t0 + 2 * 86400)), Admitted)  # January 1st


def test_a_correction_after_its_second_left_the_window_changes_nothing() -> None:
    """A request's hold keeps the bucket it was counted in: once that second has left
    the window, its settlement or release no longer touches the window's counts."""
    store = MemoryStore()
    limits = Limits(rpm=10, tpm=1000)

    def ticket(rid: str, now: float, tokens: int) -> Ticket:
        return Ticket(request_id=rid, key="alice", key_limits=limits, candidates=(), tokens=tokens, now=now)

    t0 = 1_800_000_000.0
    assert isinstance(store.admit_now(ticket("a", t0, 100)), Admitted)
    assert isinstance(store.admit_now(ticket("b", t0, 100)), Admitted)
    assert isinstance(store.admit_now(ticket("c", t0 + 30, 50)), Admitted)
    assert isinstance(store.admit_now(ticket("d", t0 + 61, 10)), Admitted)  # a's and b's second has left
    store.settle_now(Settlement("a", "alice", None, 100, 900, None, t0 + 61))
    store.release_now("b")
    store.settle_now(Settlement("c", "alice", None, 50, 70, None, t0 + 61))  # still in the window: corrected
    [use] = store.use_now(["key:alice"], t0 + 61)
    assert (use.requests_last_minute, use.tokens_last_minute, use.in_flight) == (2, 80, 1)
