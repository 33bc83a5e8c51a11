"""The memory store's semantics, as the router and the relay rely on them."""

from __future__ import annotations

import calendar

from trunkline.supervisor.admission.memory import MemoryStore, month_end
from trunkline.supervisor.admission.store import (
    Admitted,
    Candidate,
    Duplicate,
    Limits,
    Refused,
    Settlement,
    Ticket,
)

T0 = 1_800_000_000.0  # a fixed wall-clock second, so windows and days are reproducible
NO_LIMITS = Limits()


def ticket(
    rid: str,
    now: float,
    *,
    key: str = "alice",
    limits: Limits = NO_LIMITS,
    tokens: int = 10,
    candidates: tuple[Candidate, ...] = (),
) -> Ticket:
    return Ticket(request_id=rid, key=key, key_limits=limits, candidates=candidates, tokens=tokens, now=now)


def settle(
    store: MemoryStore,
    rid: str,
    now: float,
    *,
    tokens: int,
    cost: float | None,
    key: str = "alice",
    deployment: str | None = None,
    estimated: int = 10,
) -> None:
    store.settle_now(Settlement(rid, key, deployment, estimated, tokens, cost, now))


def test_rpm_admits_exactly_the_limit_then_says_when_the_window_frees() -> None:
    store = MemoryStore()
    limits = Limits(rpm=3)
    for i in range(3):
        assert isinstance(store.admit_now(ticket(f"r{i}", T0 + i, limits=limits)), Admitted)
    refused = store.admit_now(ticket("r3", T0 + 10, limits=limits))
    assert isinstance(refused, Refused)
    assert refused.error_class == "rate_limit"
    assert "rpm = 3" in refused.message and "'alice'" in refused.message
    # The first request was counted at T0: it leaves the window at T0 + 60.
    assert refused.retry_after_s == 50.0
    assert isinstance(store.admit_now(ticket("r4", T0 + 60, limits=limits)), Admitted)


def test_a_refused_ticket_consumes_nothing() -> None:
    store = MemoryStore()
    limits = Limits(rpm=1, parallel=5)
    assert isinstance(store.admit_now(ticket("a", T0, limits=limits)), Admitted)
    for i in range(5):
        assert isinstance(store.admit_now(ticket(f"b{i}", T0 + 1, limits=limits)), Refused)
    assert store.use_now(["key:alice"], T0 + 1)[0].requests_last_minute == 1
    assert store.use_now(["key:alice"], T0 + 1)[0].in_flight == 1


def test_tpm_counts_the_estimate_and_is_corrected_by_what_was_billed() -> None:
    store = MemoryStore()
    limits = Limits(tpm=1000)
    assert isinstance(store.admit_now(ticket("a", T0, limits=limits, tokens=100)), Admitted)
    settle(store, "a", T0 + 1, tokens=950, cost=None, estimated=100)
    refused = store.admit_now(ticket("b", T0 + 2, limits=limits, tokens=100))
    assert isinstance(refused, Refused) and "tpm = 1000" in refused.message
    assert store.use_now(["key:alice"], T0 + 2)[0].tokens_last_minute == 950
    too_big = store.admit_now(ticket("c", T0 + 61, limits=limits, tokens=5000))
    assert isinstance(too_big, Refused) and too_big.retry_after_s is None and "never" in too_big.message


def test_parallel_counts_until_settled_or_released() -> None:
    store = MemoryStore()
    limits = Limits(parallel=1)
    assert isinstance(store.admit_now(ticket("a", T0, limits=limits)), Admitted)
    assert isinstance(store.admit_now(ticket("b", T0, limits=limits)), Refused)
    settle(store, "a", T0, tokens=10, cost=None)
    assert isinstance(store.admit_now(ticket("c", T0, limits=limits)), Admitted)
    store.release_now("c")
    assert isinstance(store.admit_now(ticket("d", T0, limits=limits)), Admitted)
    # A settlement repeated (a relay that ends a request twice) counts once.
    settle(store, "d", T0, tokens=10, cost=None)
    settle(store, "d", T0, tokens=10, cost=None)
    assert store.use_now(["key:alice"], T0)[0].in_flight == 0


def test_a_release_gives_back_the_request_and_its_tokens() -> None:
    store = MemoryStore()
    limits = Limits(rpm=1)
    assert isinstance(store.admit_now(ticket("a", T0, limits=limits)), Admitted)
    store.release_now("a")
    assert isinstance(store.admit_now(ticket("b", T0, limits=limits)), Admitted)


def test_a_daily_budget_stops_the_key_until_utc_midnight() -> None:
    store = MemoryStore()
    limits = Limits(usd_per_day=1.0)
    assert isinstance(store.admit_now(ticket("a", T0, limits=limits)), Admitted)
    assert isinstance(store.admit_now(ticket("b", T0, limits=limits)), Admitted)  # in flight while a runs
    settle(store, "a", T0, tokens=10, cost=0.7)
    settle(store, "b", T0, tokens=10, cost=0.7)  # what was in flight may overshoot: 1.4
    refused = store.admit_now(ticket("c", T0 + 1, limits=limits))
    assert isinstance(refused, Refused) and refused.error_class == "quota_exceeded"
    midnight = (int(T0) // 86400 + 1) * 86400
    assert refused.resets_at == midnight
    assert isinstance(store.admit_now(ticket("d", midnight + 1, limits=limits)), Admitted)


def test_a_monthly_budget_resets_on_the_first_of_the_next_month() -> None:
    store = MemoryStore()
    limits = Limits(usd_per_month=2.0)
    assert isinstance(store.admit_now(ticket("a", T0, limits=limits)), Admitted)
    settle(store, "a", T0, tokens=10, cost=2.5)
    refused = store.admit_now(ticket("b", T0 + 86400, limits=limits))  # a day later, same month
    assert isinstance(refused, Refused) and refused.error_class == "quota_exceeded"
    assert refused.resets_at == month_end(store.keys["alice"].month)
    assert calendar.timegm((2027, 2, 1, 0, 0, 0)) == month_end(2027 * 12 + 0)  # January 2027 ends on Feb 1
    assert calendar.timegm((2028, 1, 1, 0, 0, 0)) == month_end(2027 * 12 + 11)  # December wraps the year


def test_the_first_admissible_candidate_serves_and_the_skipped_are_named() -> None:
    store = MemoryStore()
    a, b = Candidate("a", Limits(rpm=1)), Candidate("b")
    first = store.admit_now(ticket("r1", T0, key="", candidates=(a, b)))
    assert first == Admitted(0)
    second = store.admit_now(ticket("r2", T0, key="", candidates=(a, b)))
    assert second == Admitted(1, (("a", "rpm"),))


def test_a_deployment_cools_after_its_failures_and_serves_again_after() -> None:
    store = MemoryStore()
    a, b = Candidate("a"), Candidate("b")
    assert not store.failure_now("a", T0, threshold=2, window_s=60, cooldown_s=30)
    assert store.failure_now("a", T0 + 1, threshold=2, window_s=60, cooldown_s=30)
    assert store.admit_now(ticket("r1", T0 + 2, key="", candidates=(a, b))) == Admitted(1, (("a", "cooldown"),))
    only_a = store.admit_now(ticket("r2", T0 + 2, key="", candidates=(a,)))
    assert isinstance(only_a, Refused) and only_a.error_class == "unavailable" and only_a.retry_after_s == 29.0
    assert store.admit_now(ticket("r3", T0 + 31, key="", candidates=(a, b))) == Admitted(0)
    # Failures further apart than the window never add up.
    assert not store.failure_now("b", T0, threshold=2, window_s=10, cooldown_s=30)
    assert not store.failure_now("b", T0 + 11, threshold=2, window_s=10, cooldown_s=30)


def test_a_request_id_is_claimed_once() -> None:
    store = MemoryStore(daemon="d1", claim_s=300)
    assert isinstance(store.admit_now(ticket("same", T0)), Admitted)
    assert store.admit_now(ticket("same", T0 + 1)) == Duplicate("d1")
    assert isinstance(store.admit_now(ticket("same", T0 + 301)), Admitted)


def test_two_keys_do_not_share_limits() -> None:
    store = MemoryStore()
    limits = Limits(rpm=1)
    assert isinstance(store.admit_now(ticket("a", T0, key="alice", limits=limits)), Admitted)
    assert isinstance(store.admit_now(ticket("b", T0, key="bob", limits=limits)), Admitted)
    assert isinstance(store.admit_now(ticket("c", T0, key="alice", limits=limits)), Refused)
