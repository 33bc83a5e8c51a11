"""Client keys, their limits and budgets, and provider deployments' limits, through the
real daemon against a fake OpenAI-compatible upstream that counts its calls: every
refusal is made before any call, and says what refused, which limit and when to
come back."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import httpx
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from door import KEY as DOOR_KEY
from door import start_door
from fakes.upstream import FakeUpstream, Reply
from trunkline import Client
from trunkline.errors import TrunklineError
from trunkline.protocol.messages import KeyUse, Message, Request

pytestmark = pytest.mark.e2e

CHAT = "/v1/chat/completions"
MODEL = "local:house"
ALICE = "tl-alice-key-0123456789abcdef"
BOB = "tl-bob-key-0123456789abcdef00"
KEYS = {"TL_ALICE_KEY": ALICE, "TL_BOB_KEY": BOB}


def completion(prompt_tokens: int = 9, completion_tokens: int = 4) -> Reply:
    return Reply.json(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "house",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
    )


def held_stream(release: trio.Event) -> Reply:
    """A streamed answer that stops after its first text until `release` is set."""
    chunks = [
        {"id": "c", "object": "chat.completion.chunk", "model": "house", "choices": [{"index": 0, "delta": d}]}
        for d in ({"role": "assistant", "content": ""}, {"content": "ok"})
    ]
    chunks.append(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "model": "house",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        }
    )
    body = [f"data: {json.dumps(c)}\n\n".encode() for c in chunks] + [b"data: [DONE]\n\n"]
    return Reply(200, {"content-type": "text/event-stream"}, body, hold_after=2, release=release)


def config(upstream: FakeUpstream, clients: dict[str, Any], **provider: Any) -> dict[str, Any]:
    return {
        "providers": {"local": {"type": "openai_compat", "base_url": upstream.base_url + "/v1", **provider}},
        # USD 100 per million tokens both ways: 13 tokens cost $0.0013.
        "models": {MODEL: {"wire_name": "house", "price": {"input": 100.0, "output": 100.0}}},
        "clients": clients,
    }


ALICE_AND_BOB = {"alice": {"key_env": "TL_ALICE_KEY", "limits": {"rpm": 3}}, "bob": {"key_env": "TL_BOB_KEY"}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def value(found: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    return sum(v for n, have, v in found if n == name and labels.items() <= have.items())


def use(keys: list[KeyUse], name: str) -> KeyUse:
    return next(k for k in keys if k.name == name)


@pytest.fixture
async def upstream(nursery: trio.Nursery) -> FakeUpstream:
    up = await FakeUpstream().start(nursery)
    up.route("POST", CHAT, completion())
    return up


async def test_a_key_over_its_rpm_is_refused_before_any_call_and_keys_do_not_share_limits(start_daemon, upstream):
    port = free_port()
    daemon = await start_daemon(
        {**config(upstream, ALICE_AND_BOB), "metrics": {"listen": f"127.0.0.1:{port}"}}, env=KEYS
    )
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, token=ALICE) as alice, Client(daemon.runtime_dir, token=BOB) as bob:
            for _ in range(3):
                assert (await alice.complete(MODEL, "hi")).text == "ok"
            with pytest.raises(TrunklineError) as refused:
                await alice.complete(MODEL, "one too many")
            for _ in range(4):  # bob's key has no limit, and alice's is not his
                await bob.complete(MODEL, "hi")
            report = await alice.status()
        async with httpx.AsyncClient() as http:
            scraped = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    info = refused.value.info
    assert info.error_class == "rate_limit"
    assert "'alice'" in info.message and "rpm = 3" in info.message and "last minute" in info.message
    assert info.retry_after_s is not None and 0 < info.retry_after_s <= 60
    assert len(upstream.sent(CHAT)) == 7  # 3 of alice's, 4 of bob's: none for the refused one
    assert use(report.keys, "alice").requests_last_minute == 3 and use(report.keys, "alice").rpm == 3
    assert use(report.keys, "bob").requests_last_minute == 4 and use(report.keys, "bob").rpm is None
    assert use(report.keys, "alice").tokens_last_minute == 3 * 13  # the usage reported, not an estimate
    assert use(report.keys, "alice").usd_today == pytest.approx(3 * 0.0013)
    found = samples(scraped)
    assert value(found, "trunkline_key_requests_total", key="alice", outcome="admitted") == 3
    assert value(found, "trunkline_key_requests_total", key="alice", outcome="rate_limit") == 1
    assert value(found, "trunkline_key_requests_total", key="bob", outcome="admitted") == 4
    assert value(found, "trunkline_key_tokens_total", key="bob") == 4 * 13
    assert value(found, "trunkline_key_cost_usd_total", key="alice") == pytest.approx(3 * 0.0013)
    assert value(found, "trunkline_key_requests_in_flight", key="alice") == 0
    out = daemon.output()
    assert ALICE not in out and BOB not in out and ALICE not in scraped


async def test_status_prints_each_keys_use(start_daemon, upstream):
    daemon = await start_daemon(config(upstream, ALICE_AND_BOB), env=KEYS)
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, token=ALICE) as alice:
            await alice.complete(MODEL, "hi")
        proc = await trio.run_process(
            [*daemon.command()[:3], "status", "--runtime-dir", str(daemon.runtime_dir)],
            capture_stdout=True,
            capture_stderr=True,
            env=daemon.env,
        )
    lines = proc.stdout.decode().splitlines()
    header = next(line for line in lines if line.startswith("KEY"))
    assert "REQ/MIN" in header and "USD TODAY" in header
    alice = next(line for line in lines if line.startswith("alice "))
    assert alice.split()[1:4] == ["1/3", "13", "0"]


async def test_a_token_that_names_no_key_and_a_client_key_not_from_the_door_are_refused(start_daemon, upstream):
    daemon = await start_daemon(config(upstream, ALICE_AND_BOB), env=KEYS)
    with trio.fail_after(30):
        with pytest.raises(TrunklineError) as unknown:
            async with Client(daemon.runtime_dir, token="tl-not-a-key-0123456789abcdef") as stranger:
                await stranger.status()
        async with Client(daemon.runtime_dir, token=BOB) as bob:
            request = Request(model=MODEL, messages=[Message.user("hi")])
            with pytest.raises(TrunklineError) as posing:
                await bob.submit(request, client_key="alice")
    assert unknown.value.info.error_class == "authentication"
    assert posing.value.info.error_class == "access_denied"
    assert "front door" in posing.value.info.message
    assert not upstream.sent(CHAT)


async def test_parallel_one_refuses_a_second_request_while_the_first_runs(start_daemon, upstream):
    release = trio.Event()
    upstream.route("POST", CHAT, held_stream(release), completion())
    clients = {"alice": {"key_env": "TL_ALICE_KEY", "limits": {"parallel": 1}}}
    daemon = await start_daemon(config(upstream, clients), env=KEYS)
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, token=ALICE) as alice:
            async with alice.stream(MODEL, "first") as first:
                async for _ in first:  # its first text arrived: it runs, held by the upstream
                    break
                with pytest.raises(TrunklineError) as refused:
                    await alice.complete(MODEL, "second")
                release.set()
                assert (await first.response()).text == "ok"
            assert (await alice.complete(MODEL, "third")).text == "ok"  # its slot was given back
    info = refused.value.info
    assert info.error_class == "rate_limit" and "parallel = 1" in info.message and info.retry_after_s == 1.0
    assert len(upstream.sent(CHAT)) == 2


async def test_a_spent_daily_budget_refuses_until_the_next_utc_midnight(start_daemon, upstream):
    clients = {"alice": {"key_env": "TL_ALICE_KEY", "budget": {"usd_per_day": 0.001}}}
    daemon = await start_daemon(config(upstream, clients), env=KEYS)
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, token=ALICE) as alice:
            first = await alice.complete(MODEL, "hi")  # $0.0013: below the budget when admitted
            with pytest.raises(TrunklineError) as refused:
                await alice.complete(MODEL, "more")
            report = await alice.status()
    now = time.time()
    assert first.cost_usd == pytest.approx(0.0013)
    info = refused.value.info
    assert info.error_class == "quota_exceeded" and not info.retryable
    assert "'alice'" in info.message and "usd_per_day = 0.001" in info.message
    assert info.resets_at == (int(now // 86400) + 1) * 86400  # the next UTC midnight
    assert len(upstream.sent(CHAT)) == 1
    assert use(report.keys, "alice").usd_today == pytest.approx(0.0013)


async def test_tpm_counts_what_the_provider_billed_not_the_estimate(start_daemon, upstream):
    # Estimated at about 10 + max_tokens 20; billed 9 in and 900 out.
    upstream.route("POST", CHAT, completion(9, 900), completion())
    clients = {"alice": {"key_env": "TL_ALICE_KEY", "limits": {"tpm": 1000}}}
    daemon = await start_daemon(config(upstream, clients), env=KEYS)
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, token=ALICE) as alice:
            await alice.complete(MODEL, "hi", max_tokens=20)
            report = await alice.status()
            with pytest.raises(TrunklineError) as refused:
                await alice.complete(MODEL, "again", max_tokens=100)
            small = await alice.complete(MODEL, "a little", max_tokens=20)
    assert use(report.keys, "alice").tokens_last_minute == 909
    info = refused.value.info
    assert info.error_class == "rate_limit" and "tpm = 1000" in info.message and "909 tokens" in info.message
    assert small.text == "ok"  # 909 + about 30 fits
    assert len(upstream.sent(CHAT)) == 2


async def test_a_providers_rpm_limits_every_request_it_serves(start_daemon, upstream):
    daemon = await start_daemon(config(upstream, {}, limits={"rpm": 2}))
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            await client.complete(MODEL, "one")
            await client.complete(MODEL, "two")
            with pytest.raises(TrunklineError) as refused:
                await client.complete(MODEL, "three")
            report = await client.status()
    info = refused.value.info
    assert info.error_class == "rate_limit" and "deployment 'local'" in info.message and "rpm = 2" in info.message
    assert info.provider == "local" and info.retry_after_s is not None
    assert len(upstream.sent(CHAT)) == 2
    local = use(report.keys, "local")
    assert local.scope == "deployment" and local.requests_last_minute == 2 and local.rpm == 2


async def test_the_front_door_counts_a_named_key_and_answers_429_with_retry_after(start_daemon, upstream):
    door = await start_door(start_daemon, config(upstream, ALICE_AND_BOB), env=KEYS)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    with trio.fail_after(30):
        async with httpx.AsyncClient(base_url=door.base_url, timeout=20) as http:
            codes = []
            for _ in range(4):
                reply = await http.post("/chat/completions", json=body, headers={"authorization": f"Bearer {ALICE}"})
                codes.append(reply.status_code)
            refused = reply
            # Anthropic's form, with the unnamed door key and with bob's: neither is alice's.
            other = await http.post("/chat/completions", json=body, headers={"authorization": f"Bearer {DOOR_KEY}"})
            by_bob = await http.post("/chat/completions", json=body, headers={"x-api-key": BOB})
        async with Client(door.daemon.runtime_dir, token=ALICE) as alice:
            report = await alice.status()
    assert codes == [200, 200, 200, 429]
    assert int(refused.headers["retry-after"]) >= 1
    error = refused.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and "'alice'" in error["message"]
    assert other.status_code == 200 and by_bob.status_code == 200
    assert len(upstream.sent(CHAT)) == 5
    assert use(report.keys, "alice").requests_last_minute == 3
    assert use(report.keys, "bob").requests_last_minute == 1
    assert ALICE not in door.daemon.output() and BOB not in door.daemon.output()


async def test_the_span_of_a_request_names_its_key(start_daemon, nursery, upstream):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    collector = await FakeUpstream().start(nursery)
    collector.route("POST", "/v1/traces", Reply(200, {"content-type": "application/x-protobuf"}, []))
    collector.route("POST", "/v1/metrics", Reply(200, {"content-type": "application/x-protobuf"}, []))
    daemon = await start_daemon(
        {**config(upstream, ALICE_AND_BOB), "telemetry": {"otlp_endpoint": collector.base_url}}, env=KEYS
    )
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, token=ALICE) as alice:
            await alice.complete(MODEL, "hi")
        async with Client(daemon.runtime_dir) as nobody:
            await nobody.complete(MODEL, "hi")
        assert await daemon.stop() == 0  # its exit sends what the batch holds
    spans = [
        span
        for post in collector.sent("/v1/traces")
        for rs in ExportTraceServiceRequest.FromString(post.body).resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]
    keys = sorted(
        next((kv.value.string_value for kv in span.attributes if kv.key == "trunkline.client_key"), "-")
        for span in spans
    )
    assert keys == ["-", "alice"]
    assert ALICE not in str(spans)


async def test_on_a_network_endpoint_a_named_key_and_the_daemons_token_both_open_a_session(start_daemon, upstream):
    token = "tl-daemon-token-0123456789abcdef"
    control, events = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    daemon = await start_daemon(
        {**config(upstream, ALICE_AND_BOB), "endpoints": {"control": control, "events": events}},
        env={**KEYS, "TRUNKLINE_TOKEN": token},
    )
    with trio.fail_after(30):
        async with Client(control_endpoint=control, token=ALICE) as alice:
            await alice.complete(MODEL, "hi")
            report = await alice.status()
        async with Client(control_endpoint=control, token=token) as unnamed:
            await unnamed.complete(MODEL, "hi")  # counted against no key
        with pytest.raises(TrunklineError) as refused:
            async with Client(control_endpoint=control, token="tl-not-a-key-0123456789abcdef") as stranger:
                await stranger.status()
    assert use(report.keys, "alice").requests_last_minute == 1
    assert refused.value.info.error_class == "authentication"
    assert len(upstream.sent(CHAT)) == 2
    assert token not in daemon.output() and ALICE not in daemon.output()


async def test_a_request_whose_worker_dies_or_that_is_cancelled_gives_its_slot_back(start_daemon, upstream):
    from helpers import steps

    clients = {"alice": {"key_env": "TL_ALICE_KEY", "limits": {"parallel": 1}}}
    daemon = await start_daemon({"clients": clients}, env=KEYS)
    dies = steps({"text": "Half an "}, {"text": "answer"}, {"delay": 2}, {"crash": True})
    waits = steps({"text": "first words "}, {"delay": 60}, {"text": "never"})
    with trio.fail_after(40):
        async with Client(daemon.runtime_dir, token=ALICE) as alice:
            with pytest.raises(TrunklineError) as died:
                await alice.complete("mock:echo", "x", provider_options=dies)
            after_death = (await alice.status()).keys
            async with alice.stream("mock:echo", "y", provider_options=waits) as stream:
                async for _ in stream:
                    break  # leaving the stream cancels it
            while (await alice.status()).keys[0].in_flight:  # the cancel ends it at the worker's word
                await trio.sleep(0.01)
            assert (await alice.complete("mock:echo", "back")).text == "back"  # the slot is free again
    assert died.value.info.error_class == "unavailable"
    (alice_use,) = after_death
    assert alice_use.in_flight == 0
    # The supervisor's estimate of what the dead worker's request was billed (prompt and output).
    assert (
        alice_use.tokens_last_minute == died.value.partial.usage.input_tokens + died.value.partial.usage.output_tokens
    )
    assert alice_use.tokens_last_minute > 0
