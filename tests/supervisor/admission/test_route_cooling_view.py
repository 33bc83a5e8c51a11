"""What a daemon on a shared store knows of its route deployments' cooldowns, including
those another daemon set: read from Redis every few seconds (and from the candidates a
ticket skipped), so that selection offers a cooling deployment last. A real `Daemon`
without sockets, a real redis-server, and a second daemon's store that cools the
deployment."""

from __future__ import annotations

import time

import trio

from redis_server import RedisServer
from trunkline.config.loader import load_config
from trunkline.protocol.messages import Message, Request, Submit
from trunkline.supervisor.admission.redis_client import RedisClient
from trunkline.supervisor.admission.routes import Plan
from trunkline.supervisor.admission.shared import SharedStore
from trunkline.supervisor.daemon import Daemon


def route_config(redis_url: str) -> dict[str, object]:
    return {
        "providers": {
            "fa": {"type": "openai_compat", "base_url": "http://127.0.0.1:9/v1"},
            "fb": {"type": "openai_compat", "base_url": "http://127.0.0.1:9/v1"},
        },
        "routes": {
            "smart": {
                "strategy": "priority",
                "deployments": [
                    {"id": "a", "provider": "fa", "model": "model-a"},
                    {"id": "b", "provider": "fb", "model": "model-b", "priority": 1},
                ],
            }
        },
        "shared_state": {"redis": redis_url, "timeout_s": 2.0},
    }


async def test_a_cooldown_set_by_another_daemon_puts_the_deployment_last(
    tmp_path, nursery: trio.Nursery, redis_server: RedisServer
) -> None:
    daemon = Daemon(load_config(None, use_user_default=False, overrides=route_config(redis_server.url)), tmp_path)
    routing, store = daemon.router.routing, daemon.shared_store
    assert routing is not None and store is not None
    for slot in daemon.slots.values():
        slot.state = "running"  # a plan offers only deployments whose worker can serve
    submit = Submit(request_id="r1", client_id="c", request=Request(model="smart", messages=[Message.user("hi")]))

    def order() -> list[str]:
        plan = routing.plan(submit)
        assert isinstance(plan, Plan)
        return [d.id for d in plan.order]

    await nursery.start(store.run)
    assert order() == ["a", "b"]

    other = SharedStore(RedisClient(redis_server.url, timeout_s=2.0), daemon="other")
    await nursery.start(other.run)
    until = time.time() + 60
    await other.cooldown("a", until)

    nursery.start_soon(routing.read_cooling)
    with trio.fail_after(10):
        while "a" not in routing.cooling:
            await trio.sleep(0.02)
    assert abs(routing.cooling["a"] - until) < 0.01  # the store's own end, not a guess
    assert order() == ["b", "a"]
