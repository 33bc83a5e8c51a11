"""Three daemons sharing one Redis: three `RedisStore`s, each on its own connection,
as three daemons would be."""

from __future__ import annotations

import time

import trio

from redis_server import RedisServer
from trunkline.supervisor.admission.redis_client import RedisClient
from trunkline.supervisor.admission.redis_store import RedisStore
from trunkline.supervisor.admission.store import Admitted, Candidate, Duplicate, Limits, Refused, Settlement, Ticket

T0 = float((int(time.time()) // 86400 + 2) * 86400 + 3600)


async def three_stores(nursery: trio.Nursery, server: RedisServer, prefix: str = "trunkline") -> list[RedisStore]:
    stores = []
    for n in range(3):
        client = RedisClient(server.url, timeout_s=2.0)
        await nursery.start(client.run)
        with trio.fail_after(10):
            await client.connected.wait()
        stores.append(RedisStore(client, daemon=f"daemon-{n}", prefix=prefix))
    return stores


async def test_a_60_rpm_limit_admits_exactly_60_under_concurrent_admits_from_three_daemons(
    nursery: trio.Nursery, redis_server: RedisServer
) -> None:
    stores = await three_stores(nursery, redis_server)
    limits = Limits(rpm=60)
    admitted: list[str] = []
    refused: list[Refused] = []

    async def client_of(store: RedisStore, n: int) -> None:
        for i in range(20):  # 120 requests in all (3 daemons x 2 clients), within one second
            decision = await store.admit(
                Ticket(f"{store.daemon}-{n}-{i}", "shared-key", limits, (), 10, T0 + (i % 3) * 0.3)
            )
            if isinstance(decision, Admitted):
                admitted.append(f"{store.daemon}-{n}-{i}")
            else:
                assert isinstance(decision, Refused)
                refused.append(decision)

    with trio.fail_after(30):
        async with trio.open_nursery() as inner:
            for store in stores:
                for n in range(2):
                    inner.start_soon(client_of, store, n)
    # The admit script runs atomically on the server: while Redis is up, the overshoot
    # is none at all, whatever the concurrency or the number of daemons.
    assert len(admitted) == 60
    assert len(refused) == 60 and all(r.error_class == "rate_limit" for r in refused)
    [use] = await stores[1].use(["key:shared-key"], T0 + 1)
    assert use.requests_last_minute == 60 and use.in_flight == 60


async def test_a_budget_spent_through_one_daemon_stops_the_other_two(
    nursery: trio.Nursery, redis_server: RedisServer
) -> None:
    a, b, c = await three_stores(nursery, redis_server)
    limits = Limits(usd_per_day=1.0)
    assert isinstance(await a.admit(Ticket("r1", "k", limits, (), 10, T0)), Admitted)
    await a.settle(Settlement("r1", "k", None, 10, 12, 1.25, T0 + 1))
    for other in (b, c):
        refused = await other.admit(Ticket(f"r-{other.daemon}", "k", limits, (), 10, T0 + 2))
        assert isinstance(refused, Refused) and refused.error_class == "quota_exceeded"
        assert refused.resets_at == (int(T0) // 86400 + 1) * 86400
    [use] = await c.use(["key:k"], T0 + 2)
    assert use.usd_today == 1.25 and use.usd_this_month == 1.25


async def test_a_cooldown_set_by_one_daemon_is_seen_by_all(nursery: trio.Nursery, redis_server: RedisServer) -> None:
    a, b, c = await three_stores(nursery, redis_server)
    primary, backup = Candidate("primary"), Candidate("backup")
    assert not await a.failure("primary", T0, threshold=2, window_s=30, cooldown_s=20)
    assert await b.failure("primary", T0 + 1, threshold=2, window_s=30, cooldown_s=20)  # two daemons' failures add up
    assert await c.admit(Ticket("x", "", Limits(), (primary, backup), 1, T0 + 2)) == Admitted(
        1, (("primary", "cooldown"),)
    )
    assert await a.admit(Ticket("y", "", Limits(), (primary, backup), 1, T0 + 21)) == Admitted(0)
    await c.cooldown("backup", T0 + 100, now=T0)
    assert await b.admit(Ticket("z", "", Limits(), (backup, primary), 1, T0 + 22)) == Admitted(
        1, (("backup", "cooldown"),)
    )


async def test_a_request_id_claimed_by_one_daemon_is_a_duplicate_on_the_others(
    nursery: trio.Nursery, redis_server: RedisServer
) -> None:
    a, b, c = await three_stores(nursery, redis_server)
    decisions = []

    async def admit(store: RedisStore) -> None:
        decisions.append(await store.admit(Ticket("same-id", "", Limits(), (), 1, T0)))

    with trio.fail_after(10):
        async with trio.open_nursery() as inner:
            for store in (a, b, c):
                inner.start_soon(admit, store)
    admitted = [d for d in decisions if isinstance(d, Admitted)]
    duplicates = [d for d in decisions if isinstance(d, Duplicate)]
    assert len(admitted) == 1 and len(duplicates) == 2
    assert duplicates[0].daemon == duplicates[1].daemon and duplicates[0].daemon.startswith("daemon-")


async def test_the_prefix_separates_two_installations_on_one_redis(
    nursery: trio.Nursery, redis_server: RedisServer
) -> None:
    [one, *_] = await three_stores(nursery, redis_server, prefix="one")
    [two, *_] = await three_stores(nursery, redis_server, prefix="two")
    limits = Limits(rpm=1)
    assert isinstance(await one.admit(Ticket("a", "k", limits, (), 1, T0)), Admitted)
    assert isinstance(await two.admit(Ticket("a", "k", limits, (), 1, T0)), Admitted)
    keys = await one.client.call("KEYS", "*")
    assert isinstance(keys, list) and keys
    # One hash tag per installation: every key of one store falls in the same Cluster slot.
    assert all(isinstance(k, bytes) and (k.startswith((b"{one}:", b"{two}:"))) for k in keys)
    ttls = await one.client.pipeline([("TTL", k) for k in keys if isinstance(k, bytes)])
    assert all(isinstance(t, int) and t > 0 for t in ttls), "every key expires"
