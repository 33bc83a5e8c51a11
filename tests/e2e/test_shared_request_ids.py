"""Two daemons sharing one Redis (`shared_state.redis`), one fake upstream: the same
request id sent to both calls the provider once, and both clients get the answer."""

from __future__ import annotations

import re
import sys
from collections.abc import Awaitable, Callable

import httpx
import pytest
import trio

from fakes import chat_completions as cc
from fakes.upstream import FakeUpstream, Reply
from helpers import DaemonProcess
from redis_server import RedisServer, free_port
from trunkline import Client
from trunkline.errors import TrunklineError
from trunkline.protocol import codec
from trunkline.protocol.messages import Finish
from trunkline.supervisor.admission.redis_client import RedisClient

pytestmark = pytest.mark.e2e

PATH = "/v1/chat/completions"
ANSWER = "served once, shared twice"


async def test_the_same_request_id_sent_to_two_daemons_calls_the_provider_once(
    start_daemon: Callable[..., Awaitable[DaemonProcess]], nursery: trio.Nursery, redis_server: RedisServer
) -> None:
    upstream = await FakeUpstream().start(nursery)
    release = trio.Event()
    # The answer is held until both submits are in, so the second daemon meets a request
    # still running on the first (the harder case: its result is not stored yet).
    payloads = cc.chunks(id="c1", model="m", text=ANSWER, usage={"prompt_tokens": 5, "completion_tokens": 4})
    upstream.route("POST", PATH, Reply.sse(cc.sse(payloads), hold_after=1, release=release))
    config = {
        "providers": {"vllm": {"type": "openai_compat", "base_url": upstream.base_url + "/v1"}},
        "shared_state": {"redis": redis_server.url, "timeout_s": 2.0},
    }
    metrics_port = free_port()
    first = await start_daemon({**config, "metrics": {"listen": f"127.0.0.1:{metrics_port}"}})
    second = await start_daemon(config)
    rid = "req-shared-0001"
    answers: dict[str, str] = {}

    async def ask(daemon: DaemonProcess, name: str, submitted: trio.Event, request_id: str = rid) -> None:
        async with Client(daemon.runtime_dir) as client:
            stream = client.stream("vllm:m", "hi", request_id=request_id)
            async with stream:
                submitted.set()
                answers[name] = (await stream.response()).text

    with trio.fail_after(30):
        async with trio.open_nursery() as inner:
            one, two = trio.Event(), trio.Event()
            inner.start_soon(ask, first, "first", one)
            await one.wait()
            with trio.fail_after(10):
                await upstream.request_seen.wait()  # the first daemon is calling the provider
            inner.start_soon(ask, second, "second", two)
            await two.wait()
            release.set()
    assert answers == {"first": ANSWER, "second": ANSWER}
    assert len(upstream.sent(PATH)) == 1, "the provider was called more than once for one request id"
    assert "relays its result" in second.output()

    # Sent again later, to the daemon that did not run it: answered from the stored result,
    # which its client can replay there as it could a request the daemon ran itself.
    with trio.fail_after(30):
        async with Client(second.runtime_dir) as client:
            async with client.stream("vllm:m", "hi", request_id=rid) as stream:
                answers["again"] = (await stream.response()).text
            replayed = await client.replay(rid)
            tail = await client.replay(rid, from_seq=replayed.last_seq)
        async with Client(second.runtime_dir) as stranger:
            unknown = await stranger.replay(rid)  # another client's: not shown to it
    assert answers["again"] == ANSWER
    assert len(upstream.sent(PATH)) == 1
    assert replayed.state == "ended" and replayed.first_seq == 0 and len(replayed.events) == replayed.last_seq + 1
    events = [codec.decode_event(bytes(raw)) for raw in replayed.events]
    assert [e.seq for e in events] == list(range(replayed.last_seq + 1)) and isinstance(events[-1], Finish)
    assert events[-1].response.text == ANSWER
    assert len(tail.events) == 1 and unknown.state == "unknown"

    # `status` says the store is shared and up, and sees both daemons (each says it is
    # there every few seconds: asked until it has).
    async with Client(second.runtime_dir) as client:
        with trio.fail_after(15):
            while True:
                status = await client.status()
                assert status.shared_state is not None
                if status.shared_state.daemons == 2:
                    break
                await trio.sleep(0.1)
    assert status.shared_state.kind == "redis" and not status.shared_state.degraded
    assert status.shared_state.url == f"redis://127.0.0.1:{redis_server.port}/0"

    # Redis gone: the next request is served all the same, decided locally, and the
    # daemon says so in status, its log and the CLI.
    await redis_server.kill()
    with trio.fail_after(30):
        await ask(first, "outage", trio.Event(), "req-shared-0002")
    assert answers["outage"] == ANSWER
    async with Client(first.runtime_dir) as client:
        status = await client.status()
    shared = status.shared_state
    assert shared is not None and shared.degraded and shared.reason and shared.since is not None
    assert shared.local_decisions >= 1
    with trio.fail_after(10):
        await first.wait_for_line("shared state degraded")
    shown = await trio.run_process(
        [sys.executable, "-m", "trunkline.cli", "status", "--runtime-dir", str(first.runtime_dir)],
        capture_stdout=True,
    )
    assert f"shared state: redis redis://127.0.0.1:{redis_server.port}/0 · DEGRADED" in shown.stdout.decode()
    async with httpx.AsyncClient() as http:
        scraped = (await http.get(f"http://127.0.0.1:{metrics_port}/metrics")).text
    assert "trunkline_shared_state_degraded 1.0" in scraped
    assert re.search(r"^trunkline_shared_state_local_decisions_total [1-9]", scraped, re.M), scraped


async def test_a_duplicate_whose_owner_never_answers_ends_in_a_timeout_naming_it(
    start_daemon: Callable[..., Awaitable[DaemonProcess]], nursery: trio.Nursery, redis_server: RedisServer
) -> None:
    """A daemon that claimed the id and died before storing the result: the follower
    waits within the request's timeout, then ends the request with `timeout`."""
    daemon = await start_daemon({"shared_state": {"redis": redis_server.url, "timeout_s": 2.0}})
    redis = RedisClient(redis_server.url, timeout_s=2.0)
    await nursery.start(redis.run)
    with trio.fail_after(10):
        await redis.connected.wait()
    await redis.call("SET", "{trunkline}:claim:req-ghost", "ghost-daemon", "PX", 60_000)
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(TrunklineError) as caught:
                await client.complete("mock:echo", "hi", request_id="req-ghost", timeouts={"request_s": 1.0})
    assert caught.value.error_class == "timeout"
    assert "ghost-daemon" in str(caught.value)
