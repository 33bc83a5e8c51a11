"""The shared store through an outage: Redis killed mid-load and started again.
Three `SharedStore`s on one redis-server stand for three daemons."""

from __future__ import annotations

import logging
import signal
import time

import pytest
import trio

from redis_server import RedisServer
from trunkline.supervisor.admission.redis_client import RedisClient
from trunkline.supervisor.admission.shared import SharedStateCollector, SharedStore
from trunkline.supervisor.admission.store import Admitted, Decision, Limits, Refused, Settlement, Ticket

T0 = float((int(time.time()) // 86400 + 2) * 86400 + 3600)


async def three_shared(nursery: trio.Nursery, server: RedisServer) -> list[SharedStore]:
    stores = []
    for n in range(3):
        client = RedisClient(server.url, timeout_s=2.0)
        # The daemons' wall clock is the tests' chosen day (it names the day whose spend they read).
        store = SharedStore(client, daemon=f"daemon-{n}", clock=lambda: T0)
        await nursery.start(store.run)
        stores.append(store)
    for _ in range(2):  # all say they are here, then each counts the three (it runs every few seconds too)
        for store in stores:
            await store.refresh()
    return stores


async def wait_until(store: SharedStore, *, degraded: bool) -> None:
    with trio.fail_after(15):
        while store.degraded != degraded:
            store.client.retry_now()
            with trio.move_on_after(0.2):  # a bounded look again: the reconnect's backoff runs on
                await store.changed.wait()


async def test_redis_killed_and_restarted_mid_load_loses_no_admit_and_bills_each_request_once(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="trunkline.supervisor")
    server = await RedisServer().start(nursery)
    try:
        stores = await three_shared(nursery, server)
        assert [s.daemons for s in stores] == [3, 3, 3], [(s.degraded, s.reason) for s in stores]
        limits = Limits(rpm=60, usd_per_day=100.0)
        decisions: list[Decision] = []
        billed_in_outage = 0.0
        billed_after = 0.0

        async def request(store: SharedStore, rid: str, now: float, cost: float) -> Decision:
            decision = await store.admit(Ticket(rid, "k", limits, (), 10, now))
            decisions.append(decision)
            if isinstance(decision, Admitted):
                store.settle_soon(Settlement(rid, "k", None, 10, 12, cost, now + 0.5))
            return decision

        # Before: Redis decides. (What Redis holds when it is killed is gone with it:
        # this one runs without persistence; a production Redis keeps it on disk or a
        # replica. The test counts what the daemons must not lose: their own.)
        for i, store in enumerate(stores):
            await request(store, f"before-{i}", T0, 0.01)
        with trio.fail_after(10):
            while any(s.pending for s in stores):
                await trio.sleep(0.01)

        await server.kill()
        # During: every admit is answered (none fails), decided locally with a third of
        # the limit each: 20 requests a minute per daemon, 60 in all.
        for i in range(30):
            for store in stores:
                decision = await request(store, f"during-{store.daemon}-{i}", T0 + 1, 0.25)
                if isinstance(decision, Admitted):
                    billed_in_outage += 0.25
        assert all(s.degraded for s in stores)
        during = decisions[3:]
        assert len(during) == 90
        assert sum(isinstance(d, Admitted) for d in during) == 60
        # The bound during an outage (docs/ARCHITECTURE.md): each daemon admits its third of
        # the limit from an empty local window, so the minute the outage starts may see what
        # the shared window held (3) plus the limit again (60): 63, within twice the limit.
        admitted_this_minute = sum(isinstance(d, Admitted) for d in decisions)
        assert admitted_this_minute == 63 <= 2 * 60
        assert all(
            isinstance(d, Refused) and d.error_class == "rate_limit" for d in during if not isinstance(d, Admitted)
        )
        health = stores[0].health()
        assert health.degraded and health.since is not None and health.reason and health.daemons == 3
        assert int(health.extra["local_decisions"]) == 30 and "127.0.0.1" in health.extra["url"]
        assert [s.local_decisions for s in stores] == [30, 30, 30]
        assert any("shared state degraded" in r.getMessage() for r in caplog.records)
        metrics = {m.name: m.samples[0].value for m in SharedStateCollector(stores[0]).collect()}
        assert metrics["trunkline_shared_state_degraded"] == 1
        assert metrics["trunkline_shared_state_local_decisions"] == 30

        # After: the same port again (a fresh Redis: `--save ''` kept nothing), the
        # outage's settlements are replayed, then Redis decides again.
        await server.start(nursery)
        for store in stores:
            await wait_until(store, degraded=False)
        assert all(not s.pending for s in stores)
        assert any("shared state recovered" in r.getMessage() for r in caplog.records)
        # Every request of the outage is billed once, and counts in the shared window too
        # (admitted locally, counted at its settlement): the 60 of this minute.
        [use] = await stores[0].use(["key:k"], T0 + 2)
        assert use.usd_today == pytest.approx(billed_in_outage)
        assert use.requests_last_minute == 60 and use.in_flight == 0
        assert sum(s.replayed for s in stores) == 60

        # A minute on, Redis decides again (the window has room again).
        for i, store in enumerate(stores):
            decision = await request(store, f"after-{i}", T0 + 62, 0.5)
            assert isinstance(decision, Admitted)
            billed_after += 0.5
        assert [s.local_decisions for s in stores] == [30, 30, 30]

        async def settled() -> float:
            [use] = await stores[2].use(["key:k"], T0 + 63)
            return use.usd_today

        # The flusher sends the last settlements after their admits returned: wait for it.
        with trio.fail_after(10):
            while abs(await settled() - (billed_in_outage + billed_after)) > 1e-9:
                await trio.sleep(0.01)
        # A settlement sent again (a batch whose reply was lost) is not billed twice.
        again = Settlement("after-0", "k", None, 10, 12, 0.5, T0 + 62.5)
        await stores[1].settle(again)
        assert await settled() == pytest.approx(billed_in_outage + billed_after)
    finally:
        await server.kill()


async def test_a_degraded_daemon_divides_the_budget_left_by_the_daemons_seen(
    nursery: trio.Nursery, redis_server: RedisServer
) -> None:
    stores = await three_shared(nursery, redis_server)
    limits = Limits(usd_per_day=1.0)
    a = stores[0]
    assert isinstance(await a.admit(Ticket("r1", "k", limits, (), 10, T0)), Admitted)
    await a.settle(Settlement("r1", "k", None, 10, 10, 0.4, T0))
    await a.refresh()  # reads the spend of the budgets it has seen: 0.4 of 1.0
    await redis_server.kill()
    # 0.6 left, a third each: this daemon may spend 0.2 more (plus what is in flight when it crosses).
    assert isinstance(await a.admit(Ticket("r2", "k", limits, (), 10, T0 + 1)), Admitted)
    assert a.degraded
    a.settle_soon(Settlement("r2", "k", None, 10, 10, 0.15, T0 + 1))
    assert isinstance(await a.admit(Ticket("r3", "k", limits, (), 10, T0 + 2)), Admitted)
    a.settle_soon(Settlement("r3", "k", None, 10, 10, 0.15, T0 + 2))
    refused = await a.admit(Ticket("r4", "k", limits, (), 10, T0 + 3))
    assert isinstance(refused, Refused) and refused.error_class == "quota_exceeded"


async def test_a_daemon_that_starts_while_redis_is_down_serves_and_recovers(nursery: trio.Nursery) -> None:
    server = RedisServer()
    client = RedisClient(server.url, timeout_s=0.5)
    store = SharedStore(client, daemon="alone")
    await nursery.start(store.run)
    try:
        assert store.degraded and store.reason and "could not connect" in store.reason
        assert isinstance(await store.admit(Ticket("a", "k", Limits(rpm=5), (), 1, T0)), Admitted)
        await server.start(nursery)
        await wait_until(store, degraded=False)
        assert isinstance(await store.admit(Ticket("b", "k", Limits(rpm=5), (), 1, T0)), Admitted)
    finally:
        await server.kill()


async def test_a_redis_that_refuses_writes_is_decided_around_not_an_outage(
    nursery: trio.Nursery, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="trunkline.supervisor")
    [store, *_] = await three_shared(nursery, redis_server)
    admin = store.client
    await admin.call("CONFIG", "SET", "maxmemory-policy", "noeviction")
    await admin.call("CONFIG", "SET", "maxmemory", "1")  # every write is refused: OOM
    decision = await store.admit(Ticket("oom", "k", Limits(rpm=5), (), 1, T0))
    assert isinstance(decision, Admitted)
    assert not store.degraded and store.local_decisions == 1
    assert any("Redis refused an admission" in r.getMessage() and "OOM" in r.getMessage() for r in caplog.records)
    await store.settle(Settlement("oom", "k", None, 1, 1, 0.1, T0))  # refused too: logged, never raised
    await admin.call("CONFIG", "SET", "maxmemory", "0")
    assert isinstance(await store.admit(Ticket("ok", "k", Limits(rpm=5), (), 1, T0)), Admitted)
    assert store.local_decisions == 1  # Redis decided this one


async def test_a_redis_that_stops_answering_mid_load_loses_and_double_bills_nothing(
    nursery: trio.Nursery, redis_server: RedisServer
) -> None:
    """Redis frozen (SIGSTOP) while three daemons admit and settle concurrently: calls
    time out, every daemon decides locally, and what was in flight when it froze (a
    batch of settlements Redis may still run when it wakes, then sent again) is billed
    once. Redis keeps its data here, so the totals are exact."""
    stores = []
    for n in range(3):
        client = RedisClient(redis_server.url, timeout_s=0.3)
        store = SharedStore(client, daemon=f"daemon-{n}", clock=lambda: T0)
        await nursery.start(store.run)
        stores.append(store)
    limits = Limits(rpm=1_000_000, usd_per_day=1_000_000.0)
    billed: list[float] = []
    done = [0] * 9
    stop = trio.Event()

    async def load(store: SharedStore, slot: int) -> None:
        i = 0
        while not stop.is_set():
            rid = f"{store.daemon}-{slot}-{i}"
            decision = await store.admit(Ticket(rid, "k", limits, (), 10, T0 + 1))
            assert isinstance(decision, Admitted)  # never refused, never an exception
            cost = (slot + 1) / 1024  # exact in binary: the totals compare exactly
            store.settle_soon(Settlement(rid, "k", None, 10, 10, cost, T0 + 1))
            billed.append(cost)
            done[slot] += 1
            i += 1
            await trio.sleep(0)  # a checkpoint: a local decision never awaits

    async def until_each_did(more: int) -> None:
        target = [d + more for d in done]
        while any(d < t for d, t in zip(done, target, strict=True)):
            await trio.sleep(0.005)

    assert redis_server.proc is not None
    with trio.fail_after(60):
        async with trio.open_nursery() as inner:
            for k, store in enumerate(stores):
                for j in range(3):
                    inner.start_soon(load, store, k * 3 + j)
            await until_each_did(20)
            redis_server.proc.send_signal(signal.SIGSTOP)
            try:
                for store in stores:
                    while not store.degraded:
                        await trio.sleep(0.005)
                await until_each_did(20)
            finally:
                redis_server.proc.send_signal(signal.SIGCONT)
            for store in stores:
                await wait_until(store, degraded=False)
            await until_each_did(20)
            stop.set()
        while any(s.pending for s in stores):  # the last settlements, after their admits
            await trio.sleep(0.005)
    [use] = await stores[0].use(["key:k"], T0 + 1)
    assert use.usd_today == sum(billed)
    assert use.requests_last_minute == len(billed)
    assert use.in_flight == 0
    assert all(s.local_decisions > 0 for s in stores)
