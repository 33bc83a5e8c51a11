"""A routed request decided in the same ticket as its client key, on the gate's store:
in memory (one count for the key and one for the deployment that served), and on a
Redis shared by two daemons (a deployment cooled by failures on one is skipped by the
other; a fallback from a 529 answer, and a fallback that nothing may take, whose error
still reaches the client)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from fakes import chat_completions as cc
from fakes.upstream import FakeUpstream
from helpers import DaemonProcess
from redis_server import RedisServer
from trunkline import Client
from trunkline.errors import TrunklineError
from trunkline.protocol.messages import KeyUse, StreamStart

pytestmark = pytest.mark.e2e

PATH = "/v1/chat/completions"
ALICE = "tl-alice-key-0123456789abcdef"
KEYS = {"TL_ALICE_KEY": ALICE}
OVERLOADED = cc.error(529, "Overloaded", "overloaded_error", None)
BROKEN = cc.error(503, "upstream is down", "server_error", None)


def routed(a: FakeUpstream, b: FakeUpstream, route: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """Route `smart`: deployment a (priority 0, so offered first) and b (priority 1)."""
    deployments = [
        {"id": "a", "provider": "fa", "model": "model-a", **route.pop("a", {})},
        {"id": "b", "provider": "fb", "model": "model-b", "priority": 1, **route.pop("b", {})},
    ]
    return {
        "providers": {
            "fa": {"type": "openai_compat", "base_url": a.base_url + "/v1"},
            "fb": {"type": "openai_compat", "base_url": b.base_url + "/v1"},
        },
        "retry": {"max_retries": 0},
        "routes": {"smart": {"strategy": "priority", **route, "deployments": deployments}},
        **extra,
    }


def use(keys: list[KeyUse], scope: str, name: str) -> KeyUse:
    return next(k for k in keys if k.scope == scope and k.name == name)


async def test_a_routed_request_with_a_key_is_counted_once_for_the_key_and_once_for_its_deployment(
    start_daemon: Callable[..., Awaitable[DaemonProcess]], nursery: trio.Nursery
) -> None:
    a = await FakeUpstream().start(nursery)
    b = await FakeUpstream().start(nursery)
    a.route("POST", PATH, cc.answering("from a"))
    b.route("POST", PATH, cc.answering("from b"))
    clients = {"alice": {"key_env": "TL_ALICE_KEY", "limits": {"rpm": 3}}}
    daemon = await start_daemon(routed(a, b, {"a": {"limits": {"rpm": 2}}}, clients=clients), env=KEYS)
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, token=ALICE) as alice:
            served = [(await alice.complete("smart", "hi")).deployment for _ in range(3)]
            # a's rpm is spent after two: the same ticket that counts the key took b.
            assert served == ["a", "a", "b"]
            with pytest.raises(TrunklineError) as refused:
                await alice.complete("smart", "hi")
            status = await alice.status()
    assert refused.value.error_class == "rate_limit"
    assert "key 'alice'" in refused.value.message
    assert len(a.sent(PATH)) == 2 and len(b.sent(PATH)) == 1
    keys = status.keys
    assert use(keys, "key", "alice").requests_last_minute == 3
    assert use(keys, "key", "alice").in_flight == 0
    assert (use(keys, "deployment", "a").requests_last_minute, use(keys, "deployment", "a").rpm) == (2, 2)
    assert use(keys, "deployment", "b").requests_last_minute == 1
    assert use(keys, "deployment", "b").in_flight == 0


async def test_a_deployment_cooled_by_failures_on_one_daemon_is_skipped_by_the_other(
    start_daemon: Callable[..., Awaitable[DaemonProcess]], nursery: trio.Nursery, redis_server: RedisServer
) -> None:
    a = await FakeUpstream().start(nursery)
    b = await FakeUpstream().start(nursery)
    a.route("POST", PATH, BROKEN)
    b.route("POST", PATH, cc.answering("from b"))
    route = {"breaker": {"failures": 2, "window_s": 60, "cooldown_s": 60}}
    config = routed(a, b, route, shared_state={"redis": redis_server.url, "timeout_s": 2.0})
    first = await start_daemon(config)
    second = await start_daemon(config)
    with trio.fail_after(30):
        async with Client(first.runtime_dir) as client:
            for _ in range(2):  # a fails, b serves: the second failure cools a in Redis
                response = await client.complete("smart", "hi")
                assert response.deployment == "b"
                assert [f.deployment for f in response.fallbacks] == ["a"]
        await first.wait_for_line("deployment a cooled down")
        assert len(a.sent(PATH)) == 2
        async with Client(second.runtime_dir) as client:
            for _ in range(4):
                response = await client.complete("smart", "hi")
                assert response.deployment == "b"
                assert response.fallbacks == []  # a was never tried: cooling down, for every daemon
            status = await client.status()
    assert len(a.sent(PATH)) == 2, "the second daemon called a deployment the first had cooled"
    cooled = use(status.keys, "deployment", "a").cooldown_until
    assert cooled is not None


async def test_a_fallback_with_shared_state_goes_on_or_hands_the_client_its_error(
    start_daemon: Callable[..., Awaitable[DaemonProcess]], nursery: trio.Nursery, redis_server: RedisServer
) -> None:
    a = await FakeUpstream().start(nursery)
    b = await FakeUpstream().start(nursery)
    a.route("POST", PATH, OVERLOADED)
    b.route("POST", PATH, cc.answering("from b"))
    clients = {"alice": {"key_env": "TL_ALICE_KEY", "limits": {"rpm": 10}}}
    config = routed(
        a, b, {"b": {"limits": {"rpm": 2}}}, clients=clients, shared_state={"redis": redis_server.url, "timeout_s": 2.0}
    )
    daemon = await start_daemon(config, env=KEYS)
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, token=ALICE) as alice:
            response = await alice.complete("smart", "hi")
            assert response.text == "from b"
            assert [(f.deployment, f.error_class) for f in response.fallbacks] == [("a", "rate_limit")]
            async with alice.stream("smart", "hi") as stream:  # a stream, the same way
                events = [ev async for ev in stream]
            start = next(ev for ev in events if isinstance(ev, StreamStart))
            assert (start.deployment, start.provider) == ("b", "fb")
            assert events[-1].response.text == "from b"
            # b's two requests a minute are taken: the third's fallback finds no deployment,
            # and the 529 it withheld while it asked Redis goes out as it came.
            with pytest.raises(TrunklineError) as failed:
                await alice.complete("smart", "hi")
            status = await alice.status()
    assert failed.value.error_class == "rate_limit"
    assert "Overloaded" in failed.value.message
    assert len(a.sent(PATH)) == 3 and len(b.sent(PATH)) == 2
    alice_use = use(status.keys, "key", "alice")
    assert (alice_use.requests_last_minute, alice_use.in_flight) == (3, 0)  # once per request, fallback or not
    assert use(status.keys, "deployment", "b").requests_last_minute == 2
