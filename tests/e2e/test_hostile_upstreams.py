"""Hostile and broken upstreams, through the real daemon: each attack runs on one
request while an innocent request on the same worker goes on, and the attacker gets
its typed error with what arrived, never a silent success and never a dead worker."""

from __future__ import annotations

import gzip
import json
import os
import random
import signal
import socket

import pytest
import trio

from fakes.upstream import FakeUpstream, Reply
from helpers import check_invariants, steps
from trunkline import Client
from trunkline.errors import InvalidResponseError, NetworkError, ProviderTimeoutError
from trunkline.protocol import codec
from trunkline.protocol.messages import ErrorEvent, Finish, TextDelta

pytestmark = pytest.mark.e2e

LIMIT = 1024 * 1024  # limits.max_response_bytes for these tests
CHAT = "/chat/completions"
MODEL = "vllm:test-model"
KEY = "sk-test-key-never-to-be-seen-0000000000"


def chunk(content: str | None = None, finish: str | None = None) -> bytes:
    delta = {} if content is None else {"content": content}
    body = {"id": "c1", "model": "test-model", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


USAGE = (
    b'data: {"id": "c1", "model": "test-model", "choices": [], '
    b'"usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}\n\n'
)
GOOD = chunk("all ") + chunk("fine") + chunk(finish="stop") + USAGE + b"data: [DONE]\n\n"


def sse_reply(chunks: list[bytes], **kwargs) -> Reply:
    headers = {"content-type": "text/event-stream", **kwargs.pop("headers", {})}
    return Reply(200, headers, chunks, **kwargs)


@pytest.fixture
async def upstream(nursery) -> FakeUpstream:
    return await FakeUpstream().start(nursery)


@pytest.fixture
async def daemon(start_daemon, upstream):
    return await start_daemon(
        {
            "limits": {"max_response_bytes": LIMIT},
            "timeouts": {"stream_idle_s": 2.0},
            "providers": {
                "mock": {"enabled": False},
                "vllm": {"type": "openai_compat", "base_url": upstream.base_url, "api_key_env": "VLLM_KEY"},
            },
        },
        env={"VLLM_KEY": KEY},
    )


async def attack_beside_innocent(
    daemon, upstream: FakeUpstream, attack: Reply, *, path: str = CHAT, model: str = MODEL, good: Reply | None = None
) -> tuple[list, object]:
    """The attack on one request; once it reached the upstream, an innocent request on the
    same worker. Returns the attacker's events and the innocent response."""
    upstream.route("POST", path, attack, good or sse_reply([GOOD]))
    attacker: list = []
    innocent: list = []
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:

            async def attack_it() -> None:
                async with client.stream(model, "attack") as stream:
                    async for ev in stream:
                        attacker.append(ev)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(attack_it)
                while not upstream.sent(path):
                    await trio.sleep(0.005)
                async with client.stream(model, "innocent") as stream:
                    async for ev in stream:
                        innocent.append(ev)
    check_invariants(attacker)
    check_invariants(innocent)
    assert type(innocent[-1]) is Finish and innocent[-1].response.text == "all fine"
    assert len(upstream.sent(path)) == 2  # neither was sent again
    return attacker, innocent[-1].response


async def test_an_endless_stream_ends_at_the_response_limit(daemon, upstream):
    endless = sse_reply([chunk("start ")], repeat=chunk("x" * 1000))
    events, _ = await attack_beside_innocent(daemon, upstream, endless)
    end = events[-1]
    assert type(end) is ErrorEvent and end.error.error_class == "invalid_response"
    assert "max_response_bytes" in end.error.message
    assert end.partial.text.startswith("start xxx") and len(end.partial.text) < LIMIT
    assert end.partial.usage.estimated and end.partial.usage.output_tokens > 0
    with trio.fail_after(10):  # the worker hung up rather than read on
        while upstream.closed_early < 1:
            await trio.sleep(0.01)


async def test_a_gzip_bomb_is_stopped_as_it_inflates(daemon, upstream):
    bomb = gzip.compress(chunk("start ") + b"data: " + b"\0" * (64 * LIMIT))  # 64 MiB in about 64 KiB
    assert len(bomb) < 200_000
    reply = sse_reply(
        [bomb[i : i + 8192] for i in range(0, len(bomb), 8192)], headers={"content-encoding": "gzip"}, delay_s=0.0005
    )
    events, _ = await attack_beside_innocent(daemon, upstream, reply)
    end = events[-1]
    assert type(end) is ErrorEvent and end.error.error_class == "invalid_response"
    assert "max_response_bytes" in end.error.message and end.partial.text == "start "


async def test_one_event_larger_than_the_limit_is_refused(daemon, upstream):
    huge = chunk("y" * (2 * LIMIT))
    events, _ = await attack_beside_innocent(daemon, upstream, sse_reply([chunk("start "), huge]))
    end = events[-1]
    assert type(end) is ErrorEvent and end.error.error_class == "invalid_response"
    assert "max_response_bytes" in end.error.message and end.partial.text == "start "


async def test_a_stream_without_its_end_is_a_network_error_not_a_finish(daemon, upstream):
    cut = sse_reply([chunk("half an "), chunk("answer")])  # a complete HTTP body, but no finish_reason, no [DONE]
    events, _ = await attack_beside_innocent(daemon, upstream, cut)
    end = events[-1]
    assert type(end) is ErrorEvent and end.error.error_class == "network"
    assert "[DONE]" in end.error.message and end.partial.text == "half an answer"


async def test_a_dropped_connection_mid_stream_is_a_network_error(daemon, upstream):
    dropped = sse_reply([chunk("half "), chunk("more ")], disconnect_after=1)
    events, _ = await attack_beside_innocent(daemon, upstream, dropped)
    end = events[-1]
    assert type(end) is ErrorEvent and end.error.error_class == "network" and end.partial.text == "half "


async def test_an_html_page_with_status_200_is_an_invalid_response(daemon, upstream):
    page = Reply(200, {"content-type": "text/html"}, [b"<html><body>Welcome to nginx!</body></html>"])
    events, _ = await attack_beside_innocent(daemon, upstream, page)
    (end,) = events
    assert type(end) is ErrorEvent and end.error.error_class == "invalid_response"
    assert "text/html" in end.error.message and "nginx" in end.error.message


async def test_an_html_page_without_a_content_type_is_an_invalid_response(daemon, upstream):
    page = Reply(200, {}, [b"<html><body>Welcome</body></html>\n"])
    events, _ = await attack_beside_innocent(daemon, upstream, page)
    (end,) = events
    assert type(end) is ErrorEvent and end.error.error_class == "invalid_response"
    assert "not an event stream" in end.error.message


async def test_gzip_garbage_is_an_invalid_response(daemon, upstream):
    garbage = b"\x1f\x8b\x08\x00" + random.Random(7).randbytes(4000)
    reply = sse_reply([garbage], headers={"content-encoding": "gzip"})
    events, _ = await attack_beside_innocent(daemon, upstream, reply)
    (end,) = events
    assert type(end) is ErrorEvent and end.error.error_class == "invalid_response"
    assert "decompressed" in end.error.message


async def test_a_whole_response_request_fails_the_same_way_with_what_it_gathered(daemon, upstream):
    """A non-streamed request is streamed from the provider: the limit and the end
    marker apply to it as well, and its error carries what had arrived."""
    upstream.route(
        "POST",
        CHAT,
        sse_reply([chunk("start ")], repeat=chunk("x" * 1000)),
        sse_reply([chunk("half an "), chunk("answer")]),
    )
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(InvalidResponseError) as endless:
                await client.complete(MODEL, "endless")
            with pytest.raises(NetworkError) as cut:
                await client.complete(MODEL, "cut")
    assert "max_response_bytes" in endless.value.message
    assert endless.value.partial.text.startswith("start xxx") and endless.value.partial.usage.estimated
    assert cut.value.partial.text == "half an answer" and cut.value.partial.usage.estimated
    assert len(upstream.sent(CHAT)) == 2


async def test_a_retry_after_header_on_a_success_is_not_a_rate_limit(daemon, upstream):
    upstream.route(
        "POST", CHAT, sse_reply([GOOD], headers={"retry-after": "30", "x-ratelimit-remaining-requests": "5"})
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            response = await client.complete(MODEL, "hi")
    assert response.text == "all fine"
    assert response.rate_limit.requests_remaining == 5 and response.rate_limit.retry_after_s is None


async def test_a_whole_response_is_streamed_so_a_long_generation_is_no_timeout(daemon, upstream):
    """Longer in all than the 2 s idle timeout, never silent for more than a fraction of it."""
    words = [chunk(f"w{i} ") for i in range(30)] + [chunk(finish="stop"), USAGE, b"data: [DONE]\n\n"]
    upstream.route("POST", CHAT, sse_reply(words, delay_s=0.1))
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            response = await client.complete(MODEL, "write a lot")
    assert response.text == "".join(f"w{i} " for i in range(30))
    assert response.usage.output_tokens == 2 and response.finish_reason.reason == "stop"
    (sent,) = upstream.sent(CHAT)
    assert sent.json()["stream"] is True


@pytest.mark.parametrize(
    ("before", "why"),
    [
        (0, "retry_timeouts"),  # silent from the start: timeouts are retried only when asked
        (1, "would bill again"),  # silent after some text: never, that text was billed
    ],
)
async def test_a_timed_out_request_is_not_sent_again(daemon, upstream, before, why):
    upstream.route("POST", CHAT, sse_reply([chunk("slow "), chunk("never sent")], stall_after=before))
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(ProviderTimeoutError) as caught:
                await client.complete(MODEL, "take your time")
    assert len(upstream.sent(CHAT)) == 1
    assert why in caught.value.message
    assert (caught.value.partial is not None and caught.value.partial.text == "slow ") == bool(before)


async def test_a_refused_local_connection_is_answered_at_once(start_daemon):
    """Ollama not running: the answer says so, without the backoff (30 s here: a retry
    would run past the test's bound) and without a note about attempts."""
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    daemon = await start_daemon(
        {
            "retry": {"base_delay_s": 30.0, "max_delay_s": 60.0},
            "providers": {"ollama": {"enabled": True, "base_url": f"http://127.0.0.1:{port}"}},
        }
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            try:
                await client.complete("ollama:llama3.2", "hi")
            except NetworkError as exc:
                message = exc.message
            else:
                raise AssertionError("a refused connection did not fail the request")
    assert "is Ollama running" in message and "gave up" not in message and "retr" not in message


async def test_a_worker_killed_mid_stream_reports_an_estimated_bill(start_daemon, upstream):
    """The supervisor's own terminal event estimates usage and cost from what was
    relayed, with the latency measured; an innocent request on another worker goes on."""
    upstream.route("POST", CHAT, sse_reply([GOOD], delay_s=0.05))
    daemon = await start_daemon(
        {"providers": {"vllm": {"type": "openai_compat", "base_url": upstream.base_url, "api_key_env": "VLLM_KEY"}}},
        env={"VLLM_KEY": KEY},
    )
    slow = steps(*[{"text": f"w{i} ", "delay": 0.01} for i in range(500)], {"finish": "stop"})
    events: list = []
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client, trio.open_nursery() as nursery:
            innocent: list = []

            async def innocent_stream() -> None:
                innocent.append(await client.complete(MODEL, "innocent"))

            async with client.stream("mock:echo", "a long prompt " * 50, provider_options=slow) as stream:
                async for ev in stream:
                    events.append(ev)
                    if type(ev) is TextDelta and len(events) == 10:
                        nursery.start_soon(innocent_stream)
                        pid = {w.provider: w.pid for w in (await client.status()).workers}["mock"]
                        os.kill(pid, signal.SIGKILL)
    check_invariants(events)
    end = events[-1]
    assert type(end) is ErrorEvent and end.error.error_class == "unavailable"
    partial = end.partial
    assert partial.text.startswith("w0 w1 ")
    assert partial.usage.estimated and partial.usage.input_tokens > 50 and partial.usage.output_tokens > 0
    assert partial.usage.total_tokens == partial.usage.input_tokens + partial.usage.output_tokens
    assert partial.cost_usd is not None and partial.cost_usd > 0 and partial.pricing_version
    assert partial.latency_ms > 0 and partial.id == end.request_id
    assert innocent[0].text == "all fine"


# -- the same attacks on the Anthropic and Ollama workers ---------------------------------


def anthropic_events(*texts: str, stop: bool = True) -> bytes:
    def event(name: str, body: dict) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **body})}\n\n".encode()

    out = event(
        "message_start",
        {"message": {"id": "msg_1", "model": "claude-sonnet-4-5", "usage": {"input_tokens": 3, "output_tokens": 0}}},
    )
    out += event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    for text in texts:
        out += event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text}})
    if stop:
        out += event("content_block_stop", {"index": 0})
        out += event("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}})
        out += event("message_stop", {})
    return out


def ollama_lines(*texts: str, done: bool = True) -> list[dict]:
    lines = [{"model": "llama3.2", "message": {"role": "assistant", "content": t}, "done": False} for t in texts]
    if done:
        lines.append(
            {
                "model": "llama3.2",
                "message": {"role": "assistant", "content": ""},
                "done": True,
                "done_reason": "stop",
                "prompt_eval_count": 3,
                "eval_count": 2,
            }
        )
    return lines


PROVIDERS = {
    "anthropic": (
        "/v1/messages",
        "anthropic:claude-sonnet-4-5",
        lambda *t, end=True: sse_reply([anthropic_events(*t, stop=end)]),
    ),
    "ollama": ("/api/chat", "ollama:llama3.2", lambda *t, end=True: Reply.ndjson(ollama_lines(*t, done=end))),
}


@pytest.fixture
async def daemon_native(start_daemon, upstream):
    return await start_daemon(
        {
            "limits": {"max_response_bytes": LIMIT},
            "timeouts": {"stream_idle_s": 2.0},
            "providers": {
                "mock": {"enabled": False},
                "anthropic": {"base_url": upstream.base_url},
                "ollama": {"enabled": True, "base_url": upstream.base_url},
            },
        },
        env={"ANTHROPIC_API_KEY": KEY},
    )


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_a_native_stream_without_its_end_is_a_network_error(daemon_native, upstream, provider):
    path, model, reply = PROVIDERS[provider]
    events, _innocent = await attack_beside_innocent(
        daemon_native,
        upstream,
        reply("half an ", "answer", end=False),
        path=path,
        model=model,
        good=reply("all ", "fine"),
    )
    end = events[-1]
    assert type(end) is ErrorEvent and end.error.error_class == "network"
    assert end.partial.text == "half an answer" and end.partial.usage.estimated


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_a_native_html_page_with_status_200_is_an_invalid_response(daemon_native, upstream, provider):
    path, model, reply = PROVIDERS[provider]
    page = Reply(200, {"content-type": "text/html"}, [b"<html><body>Welcome to nginx!</body></html>"])
    events, _ = await attack_beside_innocent(
        daemon_native, upstream, page, path=path, model=model, good=reply("all ", "fine")
    )
    (end,) = events
    assert type(end) is ErrorEvent and end.error.error_class == "invalid_response"
    assert "text/html" in end.error.message


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_a_native_endless_stream_ends_at_the_response_limit(daemon_native, upstream, provider):
    path, model, reply = PROVIDERS[provider]
    first = reply("start ", end=False)
    if provider == "anthropic":
        more = anthropic_events("x" * 1000, stop=False).split(b"event: content_block_delta", 1)[1]
        first.repeat = b"event: content_block_delta" + more
    else:
        first.repeat = (json.dumps(ollama_lines("x" * 1000, done=False)[0]) + "\n").encode()
    events, _ = await attack_beside_innocent(
        daemon_native, upstream, first, path=path, model=model, good=reply("all ", "fine")
    )
    end = events[-1]
    assert type(end) is ErrorEvent and end.error.error_class == "invalid_response"
    assert "max_response_bytes" in end.error.message and end.partial.text.startswith("start xxx")


async def test_a_finished_request_whose_events_were_let_go_still_replays_its_terminal_event(start_daemon):
    """The replay budget lets the big response's deltas go once a newer request ends; its
    terminal event (the whole, billed response) stays, with a first_seq to skip to."""
    from trunkline import Message, Request

    daemon = await start_daemon({"replay": {"max_bytes": 150_000}})  # one such request fits, two do not
    big = Request(
        model="mock:echo", messages=[Message.user("x")], provider_options=steps({"text": "y" * 200}, repeat=200)
    )
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            async with client.stream(big, request_id="big") as stream:
                first = await stream.response()
            after = await client.replay("big", 0)
            assert len(after.events) > 1  # still whole: only finished requests share the budget
            async with client.stream(big, request_id="newer") as stream:
                await stream.response()
            evicted = await client.replay("big", 0)
    assert evicted.state == "ended" and evicted.first_seq == evicted.last_seq
    (terminal,) = [codec.decode_event(raw) for raw in evicted.events]
    assert type(terminal) is Finish and terminal.seq == evicted.last_seq
    assert terminal.response.text == first.text == "y" * 200 * 200


async def test_what_the_supervisor_keeps_of_an_endless_stream_is_bounded(start_daemon, upstream):
    """The request's replay ring holds at most `replay.max_request_bytes` of its newest
    events (and always its last), however much the upstream sent: `replay` shows it."""
    keep = 64 * 1024
    daemon = await start_daemon(
        {
            "limits": {"max_response_bytes": LIMIT},
            "replay": {"max_request_bytes": keep},
            "providers": {
                "mock": {"enabled": False},
                "vllm": {"type": "openai_compat", "base_url": upstream.base_url, "api_key_env": "VLLM_KEY"},
            },
        },
        env={"VLLM_KEY": KEY},
    )
    upstream.route("POST", CHAT, sse_reply([chunk("start ")], repeat=chunk("x" * 1000)))
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            seen = []
            async with client.stream(MODEL, "attack", request_id="req-endless") as stream:
                async for ev in stream:
                    seen.append(ev)
            replay = await client.replay("req-endless")
    assert type(seen[-1]) is ErrorEvent and seen[-1].error.error_class == "invalid_response"
    assert replay.state == "ended" and replay.last_seq == seen[-1].seq
    assert replay.first_seq > 100  # the oldest deltas were let go
    sizes = [len(bytes(raw)) for raw in replay.events]
    assert sum(sizes[:-1]) <= keep < sum(sizes)  # the bound, and the last event whole beyond it
    assert codec.decode_event(replay.events[-1]).partial.text == seen[-1].partial.text
