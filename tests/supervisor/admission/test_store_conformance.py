"""One suite, two stores: the memory store and the Redis store (a real redis-server)
must decide alike. Times are wall-clock seconds the tests choose (a day in the
future, so the windows, days and months are reproducible and Redis' own expiries,
which run on its real clock, never interfere)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest
import trio

from redis_server import RedisServer
from trunkline.supervisor.admission.memory import MemoryStore, month_end, month_of
from trunkline.supervisor.admission.redis_client import RedisClient
from trunkline.supervisor.admission.redis_store import RedisStore
from trunkline.supervisor.admission.store import (
    AdmissionStore,
    Admitted,
    Candidate,
    Duplicate,
    Limits,
    Refused,
    Settlement,
    Ticket,
)

#: An hour into the day after tomorrow (UTC).
T0 = float((int(time.time()) // 86400 + 2) * 86400 + 3600)
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


def settlement(
    rid: str, now: float, *, tokens: int = 10, cost: float | None = None, key: str = "alice", estimated: int = 10
) -> Settlement:
    return Settlement(rid, key, None, estimated, tokens, cost, now)


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest, nursery: trio.Nursery) -> AsyncIterator[AdmissionStore]:
    if request.param == "memory":
        yield MemoryStore(daemon="d1", claim_s=300)
        return
    server = await RedisServer().start(nursery)
    try:
        client = RedisClient(server.url, timeout_s=2.0)  # a busy test machine: not the daemon's 0.25 s
        await nursery.start(client.run)
        with trio.fail_after(10):
            await client.connected.wait()
        yield RedisStore(client, daemon="d1", claim_s=300)
    finally:
        await server.kill()


async def test_rpm_admits_exactly_the_limit_then_says_when_the_window_frees(store: AdmissionStore) -> None:
    limits = Limits(rpm=3)
    for i in range(3):
        assert isinstance(await store.admit(ticket(f"r{i}", T0 + i, limits=limits)), Admitted)
    refused = await store.admit(ticket("r3", T0 + 10, limits=limits))
    assert isinstance(refused, Refused)
    assert refused.error_class == "rate_limit"
    assert "rpm = 3" in refused.message and "'alice'" in refused.message
    assert refused.retry_after_s == 50.0  # the first request, counted at T0, leaves at T0 + 60
    assert isinstance(await store.admit(ticket("r4", T0 + 60, limits=limits)), Admitted)


async def test_a_refused_ticket_consumes_nothing(store: AdmissionStore) -> None:
    limits = Limits(rpm=1, parallel=5)
    assert isinstance(await store.admit(ticket("a", T0, limits=limits)), Admitted)
    for i in range(5):
        assert isinstance(await store.admit(ticket(f"b{i}", T0 + 1, limits=limits)), Refused)
    [use] = await store.use(["key:alice"], T0 + 1)
    assert (use.requests_last_minute, use.in_flight) == (1, 1)


async def test_tpm_counts_the_estimate_and_is_corrected_by_what_was_billed(store: AdmissionStore) -> None:
    limits = Limits(tpm=1000)
    assert isinstance(await store.admit(ticket("a", T0, limits=limits, tokens=100)), Admitted)
    await store.settle(settlement("a", T0 + 1, tokens=950, estimated=100))
    refused = await store.admit(ticket("b", T0 + 2, limits=limits, tokens=100))
    assert isinstance(refused, Refused) and "tpm = 1000" in refused.message
    assert refused.retry_after_s == 58.0
    [use] = await store.use(["key:alice"], T0 + 2)
    assert use.tokens_last_minute == 950
    too_big = await store.admit(ticket("c", T0 + 61, limits=limits, tokens=5000))
    assert isinstance(too_big, Refused) and too_big.retry_after_s is None and "never" in too_big.message


async def test_parallel_counts_until_settled_or_released(store: AdmissionStore) -> None:
    limits = Limits(parallel=1)
    assert isinstance(await store.admit(ticket("a", T0, limits=limits)), Admitted)
    refused = await store.admit(ticket("b", T0, limits=limits))
    assert isinstance(refused, Refused) and refused.retry_after_s == 1.0 and "parallel = 1" in refused.message
    await store.settle(settlement("a", T0))
    assert isinstance(await store.admit(ticket("c", T0, limits=limits)), Admitted)
    await store.release("c", "alice", None, 10)
    assert isinstance(await store.admit(ticket("d", T0, limits=limits)), Admitted)
    # A settlement repeated (a relay that ends a request twice, a replay after a reconnect) counts once.
    await store.settle(settlement("d", T0, cost=0.25))
    await store.settle(settlement("d", T0, cost=0.25))
    [use] = await store.use(["key:alice"], T0)
    assert use.in_flight == 0
    assert use.usd_today == pytest.approx(0.25)


async def test_a_release_gives_back_the_request_and_its_tokens(store: AdmissionStore) -> None:
    limits = Limits(rpm=1)
    assert isinstance(await store.admit(ticket("a", T0, limits=limits, tokens=40)), Admitted)
    await store.release("a", "alice", None, 40)
    [use] = await store.use(["key:alice"], T0)
    assert (use.requests_last_minute, use.tokens_last_minute, use.in_flight) == (0, 0, 0)
    assert isinstance(await store.admit(ticket("b", T0, limits=limits)), Admitted)


async def test_a_daily_budget_stops_the_key_until_utc_midnight(store: AdmissionStore) -> None:
    limits = Limits(usd_per_day=1.0)
    assert isinstance(await store.admit(ticket("a", T0, limits=limits)), Admitted)
    assert isinstance(await store.admit(ticket("b", T0, limits=limits)), Admitted)  # in flight while a runs
    await store.settle(settlement("a", T0, cost=0.7))
    await store.settle(settlement("b", T0, cost=0.7))  # what was in flight may overshoot: 1.4
    refused = await store.admit(ticket("c", T0 + 1, limits=limits))
    assert isinstance(refused, Refused) and refused.error_class == "quota_exceeded"
    assert "usd_per_day = 1" in refused.message
    midnight = (int(T0) // 86400 + 1) * 86400
    assert refused.resets_at == midnight
    assert isinstance(await store.admit(ticket("d", midnight + 1, limits=limits)), Admitted)


async def test_a_monthly_budget_resets_on_the_first_of_the_next_month(store: AdmissionStore) -> None:
    limits = Limits(usd_per_month=2.0)
    assert isinstance(await store.admit(ticket("a", T0, limits=limits)), Admitted)
    await store.settle(settlement("a", T0, cost=2.5))
    refused = await store.admit(ticket("b", T0 + 1, limits=limits))
    assert isinstance(refused, Refused) and refused.error_class == "quota_exceeded"
    assert refused.resets_at == month_end(month_of(T0))


async def test_the_first_admissible_candidate_serves_and_the_skipped_are_named(store: AdmissionStore) -> None:
    a, b = Candidate("a", Limits(rpm=1)), Candidate("b")
    assert await store.admit(ticket("r1", T0, key="", candidates=(a, b))) == Admitted(0)
    assert await store.admit(ticket("r2", T0, key="", candidates=(a, b))) == Admitted(1, (("a", "rpm"),))
    only_a = await store.admit(ticket("r3", T0 + 5, key="", candidates=(a,)))
    assert isinstance(only_a, Refused) and only_a.scope == "deployment 'a'" and only_a.retry_after_s == 55.0
    [use_a, use_b] = await store.use(["deployment:a", "deployment:b"], T0 + 5)
    assert (use_a.requests_last_minute, use_b.requests_last_minute) == (1, 1)


async def test_every_candidate_refused_answers_with_the_one_freeing_soonest(store: AdmissionStore) -> None:
    a, b = Candidate("a", Limits(usd_per_day=0.01)), Candidate("b", Limits(rpm=1))
    await store.admit(ticket("r0", T0, key="", candidates=(b,)))
    await store.cooldown("a", T0 + 100)
    refused = await store.admit(ticket("r1", T0 + 1, key="", candidates=(a, b)))
    assert isinstance(refused, Refused) and refused.scope == "deployment 'b'" and refused.retry_after_s == 59.0


async def test_a_deployment_cools_after_its_failures_and_serves_again_after(store: AdmissionStore) -> None:
    a, b = Candidate("a"), Candidate("b")
    assert not await store.failure("a", T0, threshold=2, window_s=60, cooldown_s=30)
    assert await store.failure("a", T0 + 1, threshold=2, window_s=60, cooldown_s=30)
    assert await store.admit(ticket("r1", T0 + 2, key="", candidates=(a, b))) == Admitted(1, (("a", "cooldown"),))
    only_a = await store.admit(ticket("r2", T0 + 2, key="", candidates=(a,)))
    assert isinstance(only_a, Refused) and only_a.error_class == "unavailable" and only_a.retry_after_s == 29.0
    [use] = await store.use(["deployment:a"], T0 + 2)
    assert use.cooldown_until == T0 + 31
    assert await store.admit(ticket("r3", T0 + 31, key="", candidates=(a, b))) == Admitted(0)
    # Failures further apart than the window never add up.
    assert not await store.failure("b", T0, threshold=2, window_s=10, cooldown_s=30)
    assert not await store.failure("b", T0 + 11, threshold=2, window_s=10, cooldown_s=30)


async def test_a_request_id_is_claimed_once(store: AdmissionStore) -> None:
    assert isinstance(await store.admit(ticket("same", T0)), Admitted)
    assert await store.admit(ticket("same", T0 + 1)) == Duplicate("d1")
    # Without a claim (the caller knows it is new) the id is not looked up.
    unclaimed = Ticket("same", "alice", NO_LIMITS, (), 10, T0 + 1, claim=False)
    assert isinstance(await store.admit(unclaimed), Admitted)


async def test_a_refused_request_claims_nothing(store: AdmissionStore) -> None:
    limits = Limits(rpm=1)
    assert isinstance(await store.admit(ticket("a", T0, limits=limits)), Admitted)
    assert isinstance(await store.admit(ticket("b", T0, limits=limits)), Refused)
    assert isinstance(await store.admit(ticket("b", T0 + 60, limits=limits)), Admitted)


async def test_two_keys_do_not_share_limits(store: AdmissionStore) -> None:
    limits = Limits(rpm=1)
    assert isinstance(await store.admit(ticket("a", T0, key="alice", limits=limits)), Admitted)
    assert isinstance(await store.admit(ticket("b", T0, key="bob", limits=limits)), Admitted)
    assert isinstance(await store.admit(ticket("c", T0, key="alice", limits=limits)), Refused)
