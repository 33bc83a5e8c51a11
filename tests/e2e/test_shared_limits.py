"""Three daemons behind one Redis (`shared_state.redis`), one fake upstream, real
clients authenticating with a named client key: the key's limits and budget hold
across the three, an outage of Redis loses and double-bills nothing, and a request id
sent to two daemons runs once with the key's ticket carrying the claim."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from fakes import chat_completions as cc
from fakes.upstream import FakeUpstream, Reply
from helpers import DaemonProcess
from redis_server import RedisServer
from trunkline import Client
from trunkline.errors import TrunklineError
from trunkline.protocol.messages import KeyUse, SharedStateStatus, StatusReport
from trunkline.supervisor.admission.redis_scripts import SCRIPTS

pytestmark = pytest.mark.e2e

StartDaemon = Callable[..., Awaitable[DaemonProcess]]

CHAT = "/v1/chat/completions"
MODEL = "local:house"
TEAM = "tl-team-key-0123456789abcdef00"
ENV = {"TL_TEAM_KEY": TEAM}
# USD 100 per million tokens both ways; the upstream bills 9 + 4 tokens: $0.0013 a request.
PRICE = {"input": 100.0, "output": 100.0}
TOKENS = 13
COST = TOKENS * 100.0 / 1_000_000


def completion() -> Reply:
    return Reply.json(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "house",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": TOKENS},
        }
    )


def config(upstream: FakeUpstream, redis: RedisServer, team: dict[str, Any]) -> dict[str, Any]:
    return {
        "providers": {"local": {"type": "openai_compat", "base_url": upstream.base_url + "/v1"}},
        "models": {MODEL: {"wire_name": "house", "price": PRICE}},
        "clients": {"team": {"key_env": "TL_TEAM_KEY", **team}},
        # Generous: a slow answer on this busy machine must not pass for an outage.
        "shared_state": {"redis": redis.url, "timeout_s": 2.0},
    }


async def three_daemons(start_daemon: StartDaemon, cfg: dict[str, Any]) -> list[DaemonProcess]:
    """Three daemons on one config, started side by side."""
    started: dict[int, DaemonProcess] = {}

    async def one(i: int) -> None:
        started[i] = await start_daemon(cfg, env=ENV)

    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(one, i)
    return [started[i] for i in range(3)]


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> FakeUpstream:
    up = await FakeUpstream().start(nursery)
    up.route("POST", CHAT, completion())
    return up


def team_use(report: StatusReport) -> KeyUse:
    return next(k for k in report.keys if k.scope == "key" and k.name == "team")


def shared_of(report: StatusReport) -> SharedStateStatus:
    assert report.shared_state is not None, "status names no shared state"
    return report.shared_state


async def until(what: str, check: Callable[[], Awaitable[bool]], timeout_s: float = 20.0) -> None:
    """Poll `check` until it holds; fail naming `what` when it does not within the time."""
    with trio.move_on_after(timeout_s):
        while not await check():
            await trio.sleep(0.02)
        return
    raise AssertionError(f"{what}: not within {timeout_s} s")


async def test_a_keys_rpm_holds_exactly_across_three_daemons_under_concurrent_load(
    start_daemon: StartDaemon, upstream: FakeUpstream, redis_server: RedisServer
) -> None:
    """90 requests at once with one key limited to 60 a minute, 30 to each of three
    daemons: exactly 60 reach the provider, the other 30 are refused `rate_limit` with
    the time to wait. While Redis answers, each admission is one atomic script on it, so
    the limit is never passed however the requests interleave: the overshoot bound is 0
    (during an outage it is larger: see the next tests and docs/ARCHITECTURE.md)."""
    rpm = 60
    overshoot_while_redis_answers = 0
    daemons = await three_daemons(start_daemon, config(upstream, redis_server, {"limits": {"rpm": rpm}}))
    served: list[int] = []
    refused: list[TrunklineError] = []

    async def ask(client: Client, daemon: int) -> None:
        try:
            response = await client.complete(MODEL, "hi")
        except TrunklineError as exc:
            refused.append(exc)
        else:
            assert response.text == "ok"
            served.append(daemon)

    with trio.fail_after(40):
        async with (
            Client(daemons[0].runtime_dir, token=TEAM) as c0,
            Client(daemons[1].runtime_dir, token=TEAM) as c1,
            Client(daemons[2].runtime_dir, token=TEAM) as c2,
        ):
            clients = [c0, c1, c2]
            async with trio.open_nursery() as load:
                for _ in range(30):
                    for i, client in enumerate(clients):
                        load.start_soon(ask, client, i)
            reports = [await client.status() for client in clients]

    # The bound holds only while Redis decides: no daemon decided anything locally.
    assert all(not shared_of(r).degraded and shared_of(r).local_decisions == 0 for r in reports)
    assert len(served) == rpm + overshoot_while_redis_answers
    assert len(refused) == 90 - rpm
    assert len(upstream.sent(CHAT)) == len(served), "a refused request reached the provider"
    for exc in refused:
        info = exc.info
        assert info.error_class == "rate_limit", info
        assert "'team'" in info.message and "rpm = 60" in info.message
        assert info.retry_after_s is not None and 0 < info.retry_after_s <= 60
    # Every daemon reads the same window from Redis.
    assert [team_use(r).requests_last_minute for r in reports] == [rpm, rpm, rpm]
    for d in daemons:
        assert TEAM not in d.output()


async def test_while_redis_is_down_each_daemon_admits_its_third_of_the_rpm(
    start_daemon: StartDaemon, upstream: FakeUpstream, redis_server: RedisServer
) -> None:
    """The bound during an outage: 30 requests pass through Redis, Redis dies, then 90
    arrive at once, 30 to each daemon. Each daemon, having seen three share the store,
    admits a third of the 60 rpm from its own empty window: 20 each, 60 in all, the rest
    refused `rate_limit`. So the minute the outage starts serves what the shared window
    held (30) plus the limit again (60): 90, within the documented bound of twice the
    limit, and never more than the limit during the outage itself."""
    rpm = 60
    daemons = await three_daemons(start_daemon, config(upstream, redis_server, {"limits": {"rpm": rpm}}))
    served = [0, 0, 0]
    refused: list[TrunklineError] = []

    async def ask(client: Client, daemon: int) -> None:
        try:
            await client.complete(MODEL, "hi")
        except TrunklineError as exc:
            refused.append(exc)
        else:
            served[daemon] += 1

    async def burst(clients: list[Client], each: int) -> None:
        async with trio.open_nursery() as load:
            for _ in range(each):
                for i, client in enumerate(clients):
                    load.start_soon(ask, client, i)

    with trio.fail_after(40):
        async with (
            Client(daemons[0].runtime_dir, token=TEAM) as c0,
            Client(daemons[1].runtime_dir, token=TEAM) as c1,
            Client(daemons[2].runtime_dir, token=TEAM) as c2,
        ):
            clients = [c0, c1, c2]

            async def all_see_three() -> bool:  # each refreshes its count every few seconds
                reports = [await c.status() for c in clients]
                return all(shared_of(r).daemons == 3 for r in reports)

            await until("every daemon seeing three", all_see_three)
            await burst(clients, 10)
            assert (sum(served), refused) == (30, [])
            await redis_server.kill()
            before = list(served)
            await burst(clients, 30)
            outage = [shared_of(await c.status()) for c in clients]
    during = [n - b for n, b in zip(served, before, strict=True)]
    assert all(s.degraded for s in outage)
    assert during == [rpm // 3] * 3
    assert len(refused) == 90 - rpm
    assert all(e.info.error_class == "rate_limit" and e.info.retry_after_s for e in refused)
    assert sum(served) == 30 + rpm <= 2 * rpm
    assert len(upstream.sent(CHAT)) == sum(served)


async def test_a_budget_spent_on_one_daemon_stops_the_other_two(
    start_daemon: StartDaemon, upstream: FakeUpstream, redis_server: RedisServer
) -> None:
    """Two requests on daemon 1 spend the key's daily budget ($0.0025: the first leaves
    $0.0013 spent, below it, so the second is admitted too and takes it to $0.0026);
    once daemon 1 has settled them (after the replies, in a batch), daemons 2 and 3
    refuse the key with `quota_exceeded`, resetting at the next UTC midnight, before any
    call to the provider."""
    budget = 0.0025
    daemons = await three_daemons(start_daemon, config(upstream, redis_server, {"budget": {"usd_per_day": budget}}))
    with trio.fail_after(40):
        async with (
            Client(daemons[0].runtime_dir, token=TEAM) as first,
            Client(daemons[1].runtime_dir, token=TEAM) as second,
            Client(daemons[2].runtime_dir, token=TEAM) as third,
        ):
            for _ in range(2):
                response = await first.complete(MODEL, "hi")
                assert response.cost_usd == pytest.approx(COST)

            async def settled() -> bool:
                return team_use(await second.status()).usd_today >= budget

            await until("daemon 1's spend seen in Redis by daemon 2", settled)
            refusals = []
            for client in (second, third, first):
                with pytest.raises(TrunklineError) as caught:
                    await client.complete(MODEL, "more")
                refusals.append(caught.value.info)
            report = await third.status()
    now = time.time()
    next_midnight = (int(now // 86400) + 1) * 86400
    for info in refusals:
        assert info.error_class == "quota_exceeded" and not info.retryable, info
        assert "'team'" in info.message and "usd_per_day = 0.0025" in info.message
        assert info.resets_at == next_midnight
    assert len(upstream.sent(CHAT)) == 2
    assert team_use(report).usd_today == pytest.approx(2 * COST)
    assert team_use(report).usd_per_day == budget


OUTAGE_TEAM = {"limits": {"rpm": 100_000}, "budget": {"usd_per_day": 1000}}


async def load_through_an_outage(
    daemons: list[DaemonProcess], begin: Callable[[], Awaitable[None]], end: Callable[[], Awaitable[None]]
) -> tuple[int, list[SharedStateStatus], list[StatusReport]]:
    """Three requests at a time on each daemon, with the key, until each has served 5
    before the outage, 5 once all three say degraded, and 5 once all say recovered; then
    waits for every settlement to reach Redis. Any failed request fails the test (a lost
    request). Returns the requests served, each daemon's shared state during the outage
    and each one's status after the catch-up."""
    served = [0, 0, 0]
    stop = trio.Event()

    async def load(client: Client, daemon: int) -> None:
        while not stop.is_set():
            response = await client.complete(MODEL, "hi")
            assert response.text == "ok"
            served[daemon] += 1

    async def each_serves(more: int) -> None:
        target = [n + more for n in served]

        async def done() -> bool:
            return all(n >= t for n, t in zip(served, target, strict=True))

        await until(f"each daemon serving {more} more requests", done)

    async def all_shared(clients: list[Client], degraded: bool) -> bool:
        reports = [await c.status() for c in clients]
        return all(shared_of(r).degraded == degraded for r in reports)

    with trio.fail_after(50):  # and well within a minute: the window counts every request
        async with (
            Client(daemons[0].runtime_dir, token=TEAM) as c0,
            Client(daemons[1].runtime_dir, token=TEAM) as c1,
            Client(daemons[2].runtime_dir, token=TEAM) as c2,
        ):
            clients = [c0, c1, c2]
            async with trio.open_nursery() as inner:
                for i, client in enumerate(clients):
                    for _ in range(3):
                        inner.start_soon(load, client, i)
                await each_serves(5)
                await begin()
                await until("every daemon degraded", lambda: all_shared(clients, True))
                await each_serves(5)  # served while Redis is out of reach, on all three
                outage = [shared_of(await c.status()) for c in clients]
                await end()
                await until("every daemon recovered", lambda: all_shared(clients, False))
                await each_serves(5)
                stop.set()
            total = sum(served)

            async def caught_up() -> bool:
                reports = [await c.status() for c in clients]
                drained = all(shared_of(r).pending_settlements == 0 for r in reports)
                return drained and team_use(reports[0]).usd_today >= total * COST - 1e-7

            await until("every settlement in Redis", caught_up)
            after = [await c.status() for c in clients]
    return total, outage, after


def assert_counted_once(
    total: int, outage: list[SharedStateStatus], after: list[StatusReport], upstream: FakeUpstream
) -> None:
    assert all(s.degraded and s.since is not None and s.reason for s in outage)
    assert all(s.local_decisions > 0 for s in outage)
    assert all(not shared_of(r).degraded for r in after)
    for report in after:  # every daemon reads the same totals from Redis
        use = team_use(report)
        assert use.requests_last_minute == total
        assert use.tokens_last_minute == total * TOKENS
        assert use.usd_today == pytest.approx(total * COST, abs=1e-7)
        assert use.in_flight == 0
    assert len(upstream.sent(CHAT)) == total


async def test_redis_killed_and_restarted_mid_load_loses_and_double_bills_no_request(
    start_daemon: StartDaemon, upstream: FakeUpstream, nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Three daemons under concurrent load with one key; Redis is killed (SIGKILL) and
    started again on the same port with the data it had acknowledged (an append-only file
    synced before each reply, as a production Redis keeps it). Every request is served,
    during the outage too; each daemon's status says degraded, then not; and once the
    daemons have caught up, the key's requests, tokens and spend in Redis are exactly
    what was served: nothing lost, nothing counted twice."""
    redis = RedisServer(data_dir=str(tmp_path))
    await redis.start(nursery)
    try:
        daemons = await three_daemons(start_daemon, config(upstream, redis, OUTAGE_TEAM))

        async def restart() -> None:
            await redis.start(nursery)

        total, outage, after = await load_through_an_outage(daemons, redis.kill, restart)
        assert_counted_once(total, outage, after, upstream)
        for d in daemons:
            assert "shared state degraded" in d.output() and "shared state recovered" in d.output()
    finally:
        await redis.kill()


class ReplyCutter:
    """A TCP proxy in front of Redis. Once `cutting`, each connection open runs on until
    it sends a batch of settlements: Redis runs the batch, the proxy drops its replies
    (and any after them) and closes the connection, so the daemon never learns that the
    batch was counted (a reply lost with a network partition); connections opened while
    cutting are closed at once, until `cutting` is off again."""

    SETTLE = SCRIPTS["settle"].sha.encode()

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.cutting = False
        self.cut = 0  # connections whose batch of settlements ran unanswered

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self, nursery: trio.Nursery) -> ReplyCutter:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, self._serve, listeners)
        return self

    async def _serve(self, daemon: trio.SocketStream) -> None:
        if self.cutting:
            await daemon.aclose()
            return
        redis = await trio.open_tcp_stream("127.0.0.1", self.target_port)
        doomed = False
        async with daemon, redis, trio.open_nursery() as pumps:

            async def commands() -> None:
                nonlocal doomed
                tail = b""  # a script's digest may straddle two reads
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    while data := await daemon.receive_some():
                        if self.cutting and self.SETTLE in tail + data:
                            doomed = True
                        tail = data[-len(self.SETTLE) :]
                        await redis.send_all(data)
                pumps.cancel_scope.cancel()

            async def replies() -> None:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    while data := await redis.receive_some():
                        if doomed:
                            self.cut += 1
                            break
                        await daemon.send_all(data)
                pumps.cancel_scope.cancel()

            pumps.start_soon(commands)
            pumps.start_soon(replies)


async def test_replies_lost_mid_load_count_nothing_twice(
    start_daemon: StartDaemon, upstream: FakeUpstream, nursery: trio.Nursery, redis_server: RedisServer
) -> None:
    """Redis runs a batch of settlements from each daemon but the replies are lost on the
    way (a proxy drops them and closes the connections, then refuses new ones for a
    while): each daemon decides locally meanwhile, and after the outage sends the batch
    again with what the outage left. Every request is served, and Redis ends with
    exactly the requests, tokens and spend served: what it ran once is not counted
    again (admissions whose replies went with the batch's are decided again locally and
    counted once too)."""
    cutter = await ReplyCutter(redis_server.port).start(nursery)
    shared = {"shared_state": {"redis": cutter.url, "timeout_s": 2.0}}
    daemons = await three_daemons(start_daemon, {**config(upstream, redis_server, OUTAGE_TEAM), **shared})

    async def cut() -> None:
        cutter.cutting = True

    async def mend() -> None:
        cutter.cutting = False

    total, outage, after = await load_through_an_outage(daemons, cut, mend)
    assert cutter.cut == 3  # one batch of settlements run unanswered on each daemon
    assert_counted_once(total, outage, after, upstream)


async def test_the_same_request_id_on_two_daemons_with_a_client_key_calls_the_provider_once(
    start_daemon: StartDaemon, nursery: trio.Nursery, redis_server: RedisServer
) -> None:
    """With a client key, the gate's one script claims the request id with the key's
    limits: the same id sent to a second daemon while the first still runs it is
    followed, not run again. Both clients get the answer, the provider is called once,
    and the key counts one request and one request's cost."""
    upstream = await FakeUpstream().start(nursery)
    release = trio.Event()
    answer = "served once, counted once"
    payloads = cc.chunks(id="c1", model="house", text=answer, usage={"prompt_tokens": 9, "completion_tokens": 4})
    upstream.route("POST", CHAT, Reply.sse(cc.sse(payloads), hold_after=1, release=release))
    cfg = config(upstream, redis_server, {"limits": {"rpm": 10}, "budget": {"usd_per_day": 1}})
    first, second, _ = await three_daemons(start_daemon, cfg)
    rid = "req-shared-key-0001"
    answers: dict[str, str] = {}

    async def ask(daemon: DaemonProcess, name: str, submitted: trio.Event) -> None:
        async with Client(daemon.runtime_dir, token=TEAM) as client, client.stream(MODEL, "hi", request_id=rid) as s:
            submitted.set()
            answers[name] = (await s.response()).text

    with trio.fail_after(40):
        async with trio.open_nursery() as inner:
            one, two = trio.Event(), trio.Event()
            inner.start_soon(ask, first, "first", one)
            await one.wait()
            await upstream.request_seen.wait()  # the first daemon is calling the provider
            inner.start_soon(ask, second, "second", two)
            await two.wait()
            release.set()
        async with Client(second.runtime_dir, token=TEAM) as client:

            async def settled() -> bool:
                return team_use(await client.status()).usd_today > 0

            await until("the request's settlement in Redis", settled)
            use = team_use(await client.status())
    assert answers == {"first": answer, "second": answer}
    assert len(upstream.sent(CHAT)) == 1, "the provider was called more than once for one request id"
    assert "relays its result" in second.output()
    assert use.requests_last_minute == 1 and use.in_flight == 0
    assert use.tokens_last_minute == TOKENS
    assert use.usd_today == pytest.approx(COST)
