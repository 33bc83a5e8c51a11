"""The HTTP runtime against a real fake server on 127.0.0.1: headers, errors, silence, cancellation."""

from __future__ import annotations

import gzip
import json
from typing import Any

import httpx
import pytest
import trio

from fakes import chat_completions as cc
from fakes.upstream import FakeUpstream, Reply
from trunkline.config.hosts import is_local
from trunkline.config.loader import ProviderConfig, RetryPolicy, TimeoutPolicy
from trunkline.protocol.codec import decode_event, split_frame
from trunkline.protocol.messages import Finish, Job, Message, ModelInfo, Request
from trunkline.workers._adapter import Call, Deadlines
from trunkline.workers._http import USER_AGENT, HttpAdapter, Leg, _proxied
from trunkline.workers._runtime import JobRunner, Outbox
from trunkline.workers._toolids import ToolIdMap
from trunkline.workers.errors import HTTPX_EXC_MAP, ProviderError, from_transport, parse_retry_after, status_class
from trunkline.workers.openai_compat.adapter import OpenAICompatAdapter


class PlainAdapter(HttpAdapter):
    provider_type = "plain"

    def credentials(self, key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"}

    def classify(self, status, headers, body):
        return ProviderError(status_class(status), body.decode(), status=status, retry_after=parse_retry_after(headers))


@pytest.fixture(autouse=True)
def plain_key(monkeypatch):
    monkeypatch.setenv("PLAIN_TEST_KEY", "sk-test-secret-value-123456")


def make(base_url: str, **timeouts) -> PlainAdapter:
    config = ProviderConfig(type="mock", base_url=base_url, headers={"x-team": "blue"}, api_key_env="PLAIN_TEST_KEY")
    return PlainAdapter("plain", config, RetryPolicy(), TimeoutPolicy(**timeouts))


def call(attempt: int = 1) -> Call:
    job = Job(
        request_id="r",
        client_id="c",
        operation_id="op-1",
        request=Request(model="x", messages=[Message.user("hi")]),
        model=ModelInfo(id="plain:x", provider="plain", wire_name="x"),
    )
    return Call(job, "plain", attempt, "op-1", Deadlines(connect_s=5, request_s=60, stream_idle_s=2))


@pytest.fixture
async def upstream(nursery) -> FakeUpstream:
    return await FakeUpstream().start(nursery)


async def test_json_call_sends_auth_idempotency_and_configured_headers(upstream):
    upstream.route("POST", "/v1/chat", Reply.json({"ok": True}))
    adapter = make(upstream.base_url)
    first, _ = await adapter.post_json(call(1), "/v1/chat", {"a": 1})
    await adapter.post_json(call(2), "/v1/chat", {"a": 1})
    await adapter.aclose()
    assert first == {"ok": True}
    a, b = upstream.requests
    assert a.headers["authorization"] == "Bearer sk-test-secret-value-123456"
    assert a.headers["idempotency-key"] == b.headers["idempotency-key"] == "op-1"  # stable across attempts
    assert a.headers["x-team"] == "blue" and a.headers["user-agent"] == USER_AGENT
    assert a.json() == {"a": 1}
    assert upstream.open_connections <= 1  # keep-alive: both calls on one connection


async def test_compressed_json_reply_is_decoded(upstream):
    body = gzip.compress(json.dumps({"ok": "gzip"}).encode())
    upstream.route(
        "POST", "/v1/chat", Reply(200, {"content-type": "application/json", "content-encoding": "gzip"}, [body])
    )
    adapter = make(upstream.base_url)
    reply, _ = await adapter.post_json(call(), "/v1/chat", {})
    await adapter.aclose()
    assert reply == {"ok": "gzip"}
    assert "gzip" in upstream.requests[0].headers["accept-encoding"]


async def test_an_environment_proxy_is_honoured(upstream, monkeypatch):
    # The proxy is the fake itself: an HTTP proxy gets the absolute URL in the request line.
    upstream.route("POST", "http://api.example.invalid/v1/chat", Reply.json({"via": "proxy"}))
    monkeypatch.setenv("HTTP_PROXY", upstream.base_url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    adapter = make("http://api.example.invalid")
    reply, _ = await adapter.post_json(call(), "/v1/chat", {})
    await adapter.aclose()
    assert reply == {"via": "proxy"}
    assert upstream.requests[0].headers["host"] == "api.example.invalid"


def test_no_proxy_and_unset_proxies_mean_a_direct_connection(monkeypatch):
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "NO_PROXY",
        "no_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    assert not _proxied("https://api.anthropic.com")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    assert _proxied("https://api.anthropic.com")
    assert not _proxied("http://127.0.0.1:11434")  # only https is proxied
    monkeypatch.setenv("NO_PROXY", "anthropic.com")
    assert not _proxied("https://api.anthropic.com")


async def test_error_status_is_classified_with_retry_after(upstream):
    upstream.route("POST", "/v1/chat", Reply(429, {"retry-after": "3"}, [b"slow down"]))
    adapter = make(upstream.base_url)
    with pytest.raises(ProviderError) as info:
        await adapter.post_json(call(), "/v1/chat", {})
    await adapter.aclose()
    assert (info.value.error_class, info.value.status, info.value.retry_after) == ("rate_limit", 429, 3.0)


async def test_malformed_json_is_invalid_response(upstream):
    upstream.route("POST", "/v1/chat", Reply(200, {"content-type": "application/json"}, [b"{not json"]))
    adapter = make(upstream.base_url)
    with pytest.raises(ProviderError, match="not JSON") as info:
        await adapter.post_json(call(), "/v1/chat", {})
    await adapter.aclose()
    assert info.value.error_class == "invalid_response" and not info.value.retryable


async def test_stream_feeds_chunks_as_they_arrive(upstream):
    upstream.route("POST", "/v1/s", Reply.sse("data: 1\n\ndata: 2\n\n", chunk_size=5, delay_s=0.01))
    adapter = make(upstream.base_url)
    got: list[bytes] = []
    await adapter.stream_leg(call(), Leg("/v1/s", {}), got.append)
    await adapter.aclose()
    assert b"".join(got) == b"data: 1\n\ndata: 2\n\n" and len(got) >= 2


@pytest.mark.parametrize("over", [0, 1])
async def test_a_plain_stream_is_read_up_to_the_limit_and_not_a_byte_past_it(upstream, over):
    # Chunks of a plain body are counted as they pass, without the inflater's pieces:
    # a body of exactly the limit is read whole; one byte more is refused with what fit.
    body = b"data: " + b"x" * 1000 + b"\n\n"
    upstream.route("POST", "/v1/s", Reply.sse(body * 4 + b"y" * over, chunk_size=len(body)))
    adapter = make(upstream.base_url)
    adapter.max_response_bytes = len(body) * 4
    got: list[bytes] = []
    if over:
        with pytest.raises(ProviderError, match="max_response_bytes") as caught:
            await adapter.stream_leg(call(), Leg("/v1/s", {}), got.append)
        assert caught.value.error_class == "invalid_response"
    else:
        await adapter.stream_leg(call(), Leg("/v1/s", {}), got.append)
    await adapter.aclose()
    assert b"".join(got) == body * 4


@pytest.mark.parametrize("through_proxy", [False, True], ids=["direct", "through an environment proxy"])
async def test_a_silent_stream_times_out_at_the_calls_idle_timeout_and_its_connection_closes(
    upstream, monkeypatch, through_proxy
):
    # The provider's idle timeout is 60 s; the call's own, 2 s, bounds each read of the body.
    base = upstream.base_url
    if through_proxy:  # the proxy is the fake itself, asked for the absolute URL
        monkeypatch.setenv("HTTP_PROXY", upstream.base_url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        base = "http://api.example.invalid"
    upstream.route(
        "POST",
        f"{base if through_proxy else ''}/v1/s",
        Reply.sse("data: 1\n\ndata: 2\n\n", chunk_size=9, stall_after=1),
    )
    adapter = make(base)
    assert adapter.timeouts.stream_idle_s == 60
    c = call()
    got: list[bytes] = []
    with trio.fail_after(10):
        with pytest.raises(ProviderError, match="sent nothing for 2s \\(stream idle timeout\\)") as info:
            await adapter.stream_leg(c, Leg("/v1/s", {}), got.append)
        await upstream.client_closed.wait()
    await adapter.aclose()
    assert got == [b"data: 1\n\n"]  # what came before the silence was handed on
    assert info.value.error_class == "timeout" and not c.upstream_open


async def test_cancelling_a_stream_closes_the_connection_at_once(upstream):
    upstream.route("POST", "/v1/s", Reply.sse("data: 1\n\n" * 3, chunk_size=9, stall_after=1))
    adapter = make(upstream.base_url)
    c = call()
    first_chunk = trio.Event()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(adapter.stream_leg, c, Leg("/v1/s", {}), lambda chunk: first_chunk.set())
            await first_chunk.wait()
            assert c.upstream_open
            nursery.cancel_scope.cancel()
        await upstream.client_closed.wait()
    assert not c.upstream_open
    # the pool is still usable afterwards
    upstream.route("POST", "/v1/chat", Reply.json({"ok": 1}))
    assert (await adapter.post_json(call(), "/v1/chat", {}))[0] == {"ok": 1}
    await adapter.aclose()


async def test_connection_refused_is_a_network_error():
    adapter = make("http://127.0.0.1:9")  # the discard port: nothing listens
    with pytest.raises(ProviderError, match="cannot connect to plain") as info:
        await adapter.post_json(call(), "/v1/chat", {})
    await adapter.aclose()
    assert info.value.error_class == "network" and info.value.retryable
    assert info.value.hold == ""  # a server on this machine that is not running: no backoff, no note
    assert not info.value.sent


def test_every_httpx_transport_error_is_mapped():
    missing = [
        e
        for e in vars(httpx).values()
        if isinstance(e, type) and issubclass(e, httpx.TransportError) and e not in HTTPX_EXC_MAP
    ]
    assert not missing, missing


@pytest.mark.parametrize(
    ("exc", "error_class"),
    [
        (httpx.ConnectTimeout("x"), "timeout"),
        (httpx.ReadTimeout("x"), "timeout"),
        (httpx.RemoteProtocolError("x"), "network"),
        (httpx.ConnectError("x"), "network"),
        (httpx.UnsupportedProtocol("x"), "not_configured"),
    ],
)
def test_transport_errors_map_to_the_most_specific_class(exc, error_class):
    assert from_transport(exc).error_class == error_class


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "12"}, 12.0),
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),
        ({}, None),
    ],
)
def test_retry_after_parsing(headers, seconds):
    assert parse_retry_after(headers, now=1445412480.0 + 1) == seconds


async def test_a_json_gzip_bomb_is_refused_at_the_limit(upstream):
    bomb = gzip.compress(json.dumps({"text": "a" * (8 << 20)}).encode())
    upstream.route(
        "POST", "/v1/chat", Reply(200, {"content-type": "application/json", "content-encoding": "gzip"}, [bomb])
    )
    adapter = make(upstream.base_url)
    adapter.max_response_bytes = 1 << 20
    with pytest.raises(ProviderError) as caught:
        await adapter.post_json(call(), "/v1/chat", {})
    await adapter.aclose()
    assert caught.value.error_class == "invalid_response" and "max_response_bytes" in caught.value.message


async def test_a_stream_of_the_wrong_content_type_is_refused_with_an_excerpt(upstream):
    upstream.route("POST", "/v1/s", Reply(200, {"content-type": "text/html"}, [b"<h1>Bad gateway</h1>" * 1000]))
    adapter = make(upstream.base_url)
    got: list[bytes] = []
    with pytest.raises(ProviderError) as caught:
        await adapter.stream_leg(call(), Leg("/v1/s", {}), got.append)
    await adapter.aclose()
    assert caught.value.error_class == "invalid_response" and "text/html" in caught.value.message
    assert "Bad gateway" in caught.value.message and len(caught.value.message) < 500 and not got


async def test_an_error_status_body_is_read_only_up_to_an_excerpt(upstream):
    upstream.route("POST", "/v1/chat", Reply(500, {"content-type": "text/plain"}, [b"e" * (1 << 20)]))
    adapter = make(upstream.base_url)
    with pytest.raises(ProviderError) as caught:
        await adapter.post_json(call(), "/v1/chat", {})
    await adapter.aclose()
    assert caught.value.error_class == "server_error" and len(caught.value.message) == 64 * 1024
    assert not caught.value.sent  # a refusal with a status: nothing billed


def test_whether_the_provider_had_the_request_follows_the_transport_error():
    request = httpx.Request("POST", "https://example.invalid/v1")
    assert not from_transport(httpx.ConnectError("refused", request=request)).sent
    assert not from_transport(httpx.WriteError("broken pipe", request=request)).sent
    assert from_transport(httpx.ReadError("reset", request=request)).sent
    assert from_transport(httpx.RemoteProtocolError("cut", request=request)).sent
    assert from_transport(httpx.ReadTimeout("slow", request=request)).sent


@pytest.mark.parametrize(
    ("host", "local"),
    [
        ("localhost", True),
        ("127.0.0.1", True),
        ("::1", True),
        ("[::1]", True),
        ("10.2.3.4", True),
        ("192.168.1.9", True),
        ("172.16.0.1", True),
        ("172.31.255.254", True),
        ("169.254.1.1", True),
        ("fd00::5", True),
        ("172.15.0.1", False),
        ("172.32.0.1", False),
        ("8.8.8.8", False),
        ("api.openai.com", False),
        ("", False),
    ],
)
def test_only_this_machine_and_private_networks_are_local(host, local):
    # 172.16.0.0/12 is private; the rest of 172/8 is not (it is routed on the internet).
    assert is_local(host) is local


async def test_idle_connections_beyond_need_are_closed_and_busy_ones_are_left_alone(upstream):
    # Three streams held open at once take three connections.
    releases = {path: trio.Event() for path in ("/v1/a", "/v1/b", "/v1/c")}
    for path, release in releases.items():
        upstream.route("POST", path, Reply.sse("data: 1\n\ndata: 2\n\n", chunk_size=9, hold_after=1, release=release))
    adapter = make(upstream.base_url)
    first = {path: trio.Event() for path in releases}
    done = {path: trio.Event() for path in releases}
    got: dict[str, list[bytes]] = {path: [] for path in releases}

    async def stream(path: str) -> None:
        def chunk(data: bytes) -> None:
            got[path].append(data)
            first[path].set()

        await adapter.stream_leg(call(), Leg(path, {}), chunk)
        done[path].set()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for path in releases:
                nursery.start_soon(stream, path)
            for event in first.values():
                await event.wait()
            assert upstream.open_connections == 3
            for path in ("/v1/a", "/v1/b"):
                releases[path].set()
                await done[path].wait()
            # Two idle, one busy: keeping one idle closes one, never the busy one.
            assert await adapter.trim_idle(1) == 1
            await upstream.wait_open_connections(2)
            releases["/v1/c"].set()
        assert all(b"".join(chunks) == b"data: 1\n\ndata: 2\n\n" for chunks in got.values())
        # Two idle now: a keep of zero still leaves one, and the next request reuses it.
        assert await adapter.trim_idle(0) == 1
        await upstream.wait_open_connections(1)
        upstream.route("POST", "/v1/chat", Reply.json({"ok": 1}))
        assert (await adapter.post_json(call(), "/v1/chat", {}))[0] == {"ok": 1}
        assert upstream.open_connections == 1
    await adapter.aclose()


async def test_a_lone_job_hands_its_connection_back_after_the_reply_and_a_busy_worker_at_once(upstream):
    upstream.route("POST", "/v1/s", Reply.sse("data: 1\n\ndata: 2\n\n"))
    adapter = make_limited(upstream.base_url, 1)  # one place: a connection kept too long would block the next
    pool = adapter.transport._pool  # httpx's httpcore pool, as trim_idle reads it
    running = 1
    adapter.jobs_running = lambda: running
    with trio.fail_after(10):
        lone = call()
        lone.defer_close = True  # as the runtime marks a job's attempts
        got: list[bytes] = []
        await adapter.stream_leg(lone, Leg("/v1/s", {}), got.append)
        # Read to its end, but its connection is the job's to hand back, once what follows
        # the read (the terminal event) has gone out.
        assert b"".join(got) == b"data: 1\n\ndata: 2\n\n"
        assert [c.is_idle() for c in pool.connections] == [False] and adapter._slots.value == 0
        await lone.settle()
        assert [c.is_idle() for c in pool.connections] == [True] and adapter._slots.value == 1
        assert lone.deferred is None
        # A second leg of the same attempt gives the first one's connection back before it
        # takes a place (else, with one place, it would wait forever).
        await adapter.stream_leg(lone, Leg("/v1/s", {}), got.append)
        await adapter.stream_leg(lone, Leg("/v1/s", {}), got.append)
        await lone.settle()
        assert adapter._slots.value == 1
        # With another job running, at once: a job starting meanwhile must find it free.
        running = 2
        busy = call()
        busy.defer_close = True
        await adapter.stream_leg(busy, Leg("/v1/s", {}), got.append)
        assert busy.deferred is None and [c.is_idle() for c in pool.connections] == [True]
        # A call outside a job (a token count, a readiness check) never leaves one behind.
        running = 1
        await adapter.stream_leg(call(), Leg("/v1/s", {}), got.append)
        assert [c.is_idle() for c in pool.connections] == [True] and adapter._slots.value == 1
        assert upstream.open_connections == 1
    await adapter.aclose()


def job_runner(base_url: str) -> tuple[JobRunner, list[str]]:
    """A worker's job runner over the OpenAI-compatible adapter with one connection, as
    `serve` wires it; and the order in which terminal events went out and connections
    were handed back."""
    adapter = OpenAICompatAdapter(
        "fake",
        ProviderConfig(type="openai_compat", base_url=base_url + "/v1", max_connections=1),
        RetryPolicy(base_delay_s=0.01, jitter=0),
        TimeoutPolicy(),
    )
    runner = JobRunner(adapter, Outbox(), ToolIdMap(None))
    adapter.jobs_running = lambda: len(runner.scopes)
    order: list[str] = []
    push, close = runner.outbox.push_frames, adapter._close

    def pushed(request_id: str, frames: list[bytes], last_seq: int, terminal: bool) -> None:
        if terminal:
            order.append("terminal")
        push(request_id, frames, last_seq, terminal)

    async def closed(response: httpx.Response) -> None:
        order.append("connection back")
        await close(response)

    runner.outbox.push_frames = pushed  # type: ignore[method-assign]
    adapter._close = closed  # type: ignore[method-assign]
    return runner, order


def chat_job(stream: bool) -> Job:
    return Job(
        request_id="r1",
        client_id="c1",
        operation_id="op-1",
        request=Request(model="fake:m", messages=[Message.user("hi")]),
        model=ModelInfo(id="fake:m", provider="fake", wire_name="m"),
        stream=stream,
    )


def terminal_of(runner: JobRunner) -> Any:
    """The last event the job sent to its client (not to the bus)."""
    frames = [f for item in runner.outbox._queue for f in getattr(item, "frames", [])]
    ours = [body for topic, body in map(split_frame, frames) if topic != "bus"]
    return decode_event(ours[-1])


@pytest.mark.parametrize("stream", [False, True], ids=["whole response", "stream"])
async def test_a_job_hands_its_connection_back_after_its_terminal_event_has_gone_out(upstream, stream):
    upstream.route("POST", "/v1/chat/completions", Reply.sse(cc.sse(cc.chunks(id="c1", model="m", text="Hi."))))
    runner, order = job_runner(upstream.base_url)
    with trio.fail_after(10):
        await runner.run(chat_job(stream))
        await runner.run(chat_job(stream))  # the one connection is free again: no wait for a place
    assert type(terminal_of(runner)) is Finish and terminal_of(runner).response.text == "Hi."
    assert order == ["terminal", "connection back"] * 2
    adapter = runner.adapter
    assert isinstance(adapter, OpenAICompatAdapter)
    assert adapter._slots.value == 1 and upstream.open_connections == 1
    await adapter.aclose()


async def test_an_answer_read_through_and_then_refused_still_hands_its_connection_back(upstream):
    # The first reply ends with neither a finish reason nor `[DONE]`: read to its end, then
    # a network error (not retried: the provider had the request). Its error goes out,
    # then its connection goes back, and the next job has it.
    cut_short = Reply.sse('data: {"id":"c0","model":"m","choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n')
    whole = Reply.sse(cc.sse(cc.chunks(id="c1", model="m", text="Hi.")))
    upstream.route("POST", "/v1/chat/completions", cut_short, whole)
    runner, order = job_runner(upstream.base_url)
    with trio.fail_after(10):
        await runner.run(chat_job(stream=False))
        assert terminal_of(runner).error.error_class == "network"
        await runner.run(chat_job(stream=False))
    assert terminal_of(runner).response.text == "Hi."
    assert order == ["terminal", "connection back"] * 2
    adapter = runner.adapter
    assert isinstance(adapter, OpenAICompatAdapter)
    assert adapter._slots.value == 1 and upstream.open_connections == 1
    await adapter.aclose()


def make_limited(base_url: str, max_connections: int, **timeouts) -> PlainAdapter:
    config = ProviderConfig(
        type="mock", base_url=base_url, api_key_env="PLAIN_TEST_KEY", max_connections=max_connections
    )
    return PlainAdapter("plain", config, RetryPolicy(), TimeoutPolicy(**timeouts))


async def test_calls_beyond_max_connections_wait_their_turn_outside_the_pool(upstream):
    # Five streams over two connections: two reach the upstream, three wait in the
    # worker's own queue (not httpcore's, which costs CPU per waiting call at every
    # change), and each goes as a connection comes free.
    release = trio.Event()
    upstream.route("POST", "/v1/s", Reply.sse("data: 1\n\ndata: 2\n\n", chunk_size=9, hold_after=1, release=release))
    adapter = make_limited(upstream.base_url, 2)
    got: list[bytes] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(adapter.stream_leg, call(), Leg("/v1/s", {}), got.append)
            while len(got) < 2:
                await trio.sleep(0.01)
            await trio.testing.wait_all_tasks_blocked(0.05)
            assert len(upstream.sent("/v1/s")) == 2
            assert adapter._slots.statistics().tasks_waiting == 3
            assert len(adapter.transport._pool._requests) == 2  # httpcore holds the two running only
            release.set()
        assert b"".join(got).count(b"data: 2\n\n") == 5
        assert len(upstream.sent("/v1/s")) == 5 and upstream.open_connections <= 2
        assert adapter._slots.value == 2  # every place given back
    await adapter.aclose()


async def test_a_call_that_finds_every_connection_busy_for_the_pool_timeout_fails_unsent(autojump_clock):
    adapter = make_limited("http://127.0.0.1:9", 1, connect_s=3)
    adapter._slots.acquire_nowait()  # the one connection, busy with another call
    with pytest.raises(ProviderError, match="all 1 connections to plain stayed busy for 3s") as info:
        await adapter.post_json(call(), "/v1/chat", {})
    assert info.value.error_class == "timeout" and info.value.sent is False
    assert trio.current_time() == pytest.approx(3.0)
    adapter._slots.release()
    assert adapter._slots.value == 1
    await adapter.aclose()
