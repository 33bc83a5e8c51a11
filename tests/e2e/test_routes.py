"""Routes through the real daemon: a model name served by two deployments, each an
OpenAI-compatible provider in front of its own fake upstream on 127.0.0.1.

Fallback from a deployment that answers 529 to a healthy one; a stream that already
sent content is never switched; the circuit breaker (failures cool a deployment, the
next requests skip it, after its cooldown it is tried again); a 429 with Retry-After
cools a deployment; rate-limit headers lower a share; weights split the traffic; the
metrics, the span and a reload."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trio
import yaml
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.parser import text_string_to_metric_families

from fakes import chat_completions as cc
from fakes.upstream import FakeUpstream, Recorded, Reply
from trunkline import Client
from trunkline.errors import TrunklineError
from trunkline.protocol.messages import BusEvent, ErrorEvent, StreamStart

pytestmark = pytest.mark.e2e

PATH = "/v1/chat/completions"


OVERLOADED = cc.error(529, "Overloaded", "overloaded_error", None)
BROKEN = cc.error(503, "upstream is down", "server_error", None)


async def two_deployments(
    start_daemon: Any, nursery: trio.Nursery, route: dict[str, Any], **extra: Any
) -> tuple[Any, FakeUpstream, FakeUpstream]:
    a = await FakeUpstream().start(nursery)
    b = await FakeUpstream().start(nursery)
    deployments = [
        {"id": "a", "provider": "fa", "model": "model-a", **route.pop("a", {})},
        {"id": "b", "provider": "fb", "model": "model-b", **route.pop("b", {})},
    ]
    config = {
        "providers": {
            "fa": {"type": "openai_compat", "base_url": a.base_url + "/v1"},
            "fb": {"type": "openai_compat", "base_url": b.base_url + "/v1"},
        },
        "retry": {"max_retries": 0},
        "routes": {"smart": {**route, "deployments": deployments}},
        **extra,
    }
    daemon = await start_daemon(config)
    return daemon, a, b


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def scraped(port: int) -> list[tuple[str, dict[str, str], float]]:
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    return [(s.name, s.labels, s.value) for family in text_string_to_metric_families(text) for s in family.samples]


def value(found: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    """The sum of the samples named `name` whose labels include `labels` (0 when none)."""
    return sum(v for n, have, v in found if n == name and labels.items() <= have.items())


async def next_bus(client: Client, name: str) -> BusEvent:
    while True:
        event = await client.bus_events.receive()
        if isinstance(event, BusEvent) and event.name == name:
            return event


async def test_a_deployment_answering_529_falls_back_to_a_healthy_one(start_daemon, nursery):
    daemon, a, b = await two_deployments(start_daemon, nursery, {"strategy": "priority", "b": {"priority": 1}})
    a.route("POST", PATH, OVERLOADED)
    b.route("POST", PATH, cc.answering("from b"))
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, watch_bus=True) as client:
            response = await client.complete("smart", "hi")
            event = await next_bus(client, "route.fallback")
            assert response.text == "from b"
            assert response.deployment == "b"
            assert [(f.deployment, f.error_class) for f in response.fallbacks] == [("a", "rate_limit")]
            assert "Overloaded" in response.fallbacks[0].message
            assert event.request_id and (event.route, event.deployment, event.next_deployment) == ("smart", "a", "b")
            assert event.error_class == "rate_limit"
            # A stream falls back the same way, and its first event names who serves it.
            async with client.stream("smart", "hi") as stream:
                events = [ev async for ev in stream]
            start = next(ev for ev in events if isinstance(ev, StreamStart))
            assert start.deployment == "b" and start.provider == "fb"
            assert events[-1].response.text == "from b"
            assert [f.deployment for f in events[-1].response.fallbacks] == ["a"]
    assert len(a.sent(PATH)) == 2 and len(b.sent(PATH)) == 2


async def test_a_stream_that_sent_content_is_not_switched(start_daemon, nursery):
    daemon, a, b = await two_deployments(start_daemon, nursery, {"strategy": "priority", "b": {"priority": 1}})
    head = cc.chunks(id="c1", model="m", text="half an ans")[:3]
    broken = "".join(f"data: {json.dumps(p)}\n\n" for p in head)
    broken += 'data: {"error": {"message": "Rate limit exceeded", "type": "rate_limit_exceeded", "code": "429"}}\n\n'
    a.route("POST", PATH, Reply.sse(broken))
    b.route("POST", PATH, cc.answering("from b"))
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client, client.stream("smart", "hi") as stream:
            events = [ev async for ev in stream]
    start, error = events[0], events[-1]
    assert isinstance(start, StreamStart) and start.deployment == "a"
    assert isinstance(error, ErrorEvent) and error.error.error_class == "server_error"  # in fallback_on
    assert error.partial is not None and error.partial.text.startswith("half")
    assert error.partial.deployment == "a" and error.partial.fallbacks == []
    assert len(b.sent(PATH)) == 0, "a stream that sent content was switched to another deployment"


async def test_the_breaker_cools_a_failing_deployment_and_tries_it_again_after(start_daemon, nursery):
    route = {"strategy": "priority", "b": {"priority": 1}, "breaker": {"failures": 2, "window_s": 60, "cooldown_s": 1}}
    daemon, a, b = await two_deployments(start_daemon, nursery, route)
    a.route("POST", PATH, BROKEN)
    b.route("POST", PATH, cc.answering("from b"))
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, watch_bus=True) as client:
            for _ in range(2):
                response = await client.complete("smart", "hi")
                assert response.deployment == "b" and [f.deployment for f in response.fallbacks] == ["a"]
            cooled = await next_bus(client, "route.cooldown")
            assert cooled.deployment == "a" and "2 failures" in (cooled.detail or "")
            # Cooled: the next requests go straight to b, and a sees none of them.
            for _ in range(3):
                response = await client.complete("smart", "hi")
                assert response.deployment == "b" and response.fallbacks == []
            assert len(a.sent(PATH)) == 2
            # After its cooldown (1 s, polled, never slept) a is tried again.
            while len(a.sent(PATH)) == 2:
                response = await client.complete("smart", "hi")
                assert response.deployment == "b"
            assert [f.deployment for f in response.fallbacks] == ["a"]


async def test_a_429_with_retry_after_cools_the_deployment(start_daemon, nursery):
    route = {"strategy": "priority", "b": {"priority": 1}, "breaker": {"failures": 10}}
    daemon, a, b = await two_deployments(start_daemon, nursery, route)
    a.route("POST", PATH, cc.error(429, "slow down", "rate_limit_exceeded", None, **{"retry-after": "120"}))
    b.route("POST", PATH, cc.answering("from b"))
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, watch_bus=True) as client:
            first = await client.complete("smart", "hi")
            cooled = await next_bus(client, "route.cooldown")
            second = await client.complete("smart", "hi")
    assert [f.deployment for f in first.fallbacks] == ["a"]
    assert cooled.deployment == "a" and cooled.wait_s is not None and 100 < cooled.wait_s <= 120
    assert second.deployment == "b" and second.fallbacks == []
    assert len(a.sent(PATH)) == 1


async def test_weights_split_the_traffic(start_daemon, nursery):
    daemon, a, b = await two_deployments(start_daemon, nursery, {"a": {"weight": 3}, "b": {"weight": 1}})
    a.route("POST", PATH, cc.answering("from a"))
    b.route("POST", PATH, cc.answering("from b"))
    served: dict[str, int] = {"a": 0, "b": 0}
    with trio.fail_after(60):
        async with Client(daemon.runtime_dir) as client:
            for _ in range(60):
                response = await client.complete("smart", "hi")
                served[response.deployment or "?"] += 1
                assert response.text == f"from {response.deployment}"
    # 3:1 over 60 requests: a serves 45 on average (binomial sd 3.4); 30-58 is 4+ sd wide.
    assert 30 <= served["a"] <= 58 and served["a"] + served["b"] == 60, served
    assert (len(a.sent(PATH)), len(b.sent(PATH))) == (served["a"], served["b"])


async def test_least_busy_sends_the_next_request_where_none_is_in_flight(start_daemon, nursery):
    daemon, a, b = await two_deployments(
        start_daemon, nursery, {"strategy": "least_busy", "a": {"weight": 2}, "b": {"weight": 1}}
    )
    release = trio.Event()
    held = Reply.sse(cc.sse(cc.chunks(id="c1", model="m", text="slow a")), chunk_size=8, hold_after=1, release=release)
    a.route("POST", PATH, held, cc.answering("from a"))
    b.route("POST", PATH, cc.answering("from b"))
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            texts: list[str] = []

            async def slow() -> None:
                async with client.stream("smart", "hi") as stream:
                    events = [ev async for ev in stream]
                texts.append(events[-1].response.text)

            async with trio.open_nursery() as inner:
                inner.start_soon(slow)
                await a.request_seen.wait()  # the heavier deployment has one in flight: the next goes to b
                busy = await client.complete("smart", "hi")
                release.set()
            idle = await client.complete("smart", "hi")  # none in flight again: the heavier first
    assert (busy.deployment, busy.text) == ("b", "from b")
    assert texts[-1] == "slow a"
    assert (idle.deployment, idle.text) == ("a", "from a")


async def test_a_route_name_answers_model_lookups(start_daemon, nursery):
    daemon, _, _ = await two_deployments(start_daemon, nursery, {})
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            info = await client.get_model_info("smart")
    assert info is not None and info.id == "smart" and info.provider == "fa"
    assert "a (fa:model-a)" in info.display_name and "b (fb:model-b)" in info.display_name


def throttling(text: str, remaining: int, limit: int = 1000) -> Callable[[Recorded], Reply]:
    """A healthy upstream whose rate-limit headers say how little of its window is left."""
    healthy = cc.answering(text)

    def reply(request: Recorded) -> Reply:
        out = healthy(request)
        out.headers.update(
            {
                "x-ratelimit-limit-requests": str(limit),
                "x-ratelimit-remaining-requests": str(remaining),
                "x-ratelimit-reset-requests": "5m0s",
            }
        )
        return out

    return reply


async def test_rate_limit_headers_saying_little_is_left_lower_a_deployments_share(start_daemon, nursery):
    daemon, a, b = await two_deployments(start_daemon, nursery, {})
    a.route("POST", PATH, throttling("from a", remaining=2))  # 0.2 % left: its share falls to 5 %
    b.route("POST", PATH, throttling("from b", remaining=900))
    served: list[str] = []
    with trio.fail_after(60):
        async with Client(daemon.runtime_dir) as client:
            for _ in range(80):
                response = await client.complete("smart", "hi")
                served.append(response.deployment or "?")
    assert "a" in served, "a was never drawn: nothing to learn its headers from"
    after = served[served.index("a") + 1 :]
    # Equal weights would give a half of what follows; lowered to 1/21 it gets ~5 % (sd
    # under 3 of ~79 requests): at most 12 leaves 3+ sd of room and is far from half.
    assert after.count("a") <= 12 and len(after) - after.count("a") >= len(after) - 12, served


async def test_fallbacks_and_cooldowns_are_in_the_metrics_and_a_reload_changes_the_routes(start_daemon, nursery):
    port = free_port()
    route = {"strategy": "priority", "b": {"priority": 1}, "breaker": {"failures": 1, "cooldown_s": 600}}
    daemon, a, b = await two_deployments(start_daemon, nursery, route, metrics={"listen": f"127.0.0.1:{port}"})
    a.route("POST", PATH, BROKEN)
    b.route("POST", PATH, cc.answering("from b"))
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            await client.complete("smart", "hi")  # a fails, is cooled (1 failure), b serves
            await client.complete("smart", "hi")  # b, straight
            found = await scraped(port)
            # A reload that puts only b in the route: it serves the next request as `smart/1`.
            config = yaml.safe_load(daemon.config_path.read_text())
            config["routes"]["smart"]["deployments"] = [{"provider": "fb", "model": "model-b"}]
            daemon.config_path.write_text(yaml.safe_dump(config))
            assert (await client.reload()).ok
            reloaded = await client.complete("smart", "hi")
    assert value(found, "trunkline_route_fallbacks_total", route="smart", from_deployment="a", to_deployment="b") == 1
    assert value(found, "trunkline_route_fallbacks_total", error_class="server_error") == 1
    assert value(found, "trunkline_route_cooldowns_total", route="smart", deployment="a") == 1
    assert value(found, "trunkline_route_requests_total", route="smart", deployment="b", outcome="stop") == 2
    assert value(found, "trunkline_route_requests_total", deployment="a") == 0  # it never ended a request
    assert reloaded.deployment == "smart/1" and reloaded.text == "from b"
    assert len(a.sent(PATH)) == 1


async def test_a_deployment_whose_provider_cannot_serve_is_skipped(start_daemon, nursery):
    b = await FakeUpstream().start(nursery)
    b.route("POST", PATH, cc.answering("from b"))
    deployments = [
        {"id": "nowhere", "provider": "fc", "model": "m"},  # no base_url: not configured
        {"id": "b", "provider": "fb", "model": "model-b", "priority": 1},
    ]
    config = {
        "providers": {
            "fb": {"type": "openai_compat", "base_url": b.base_url + "/v1"},
            "fc": {"type": "openai_compat"},
        },
        "routes": {
            "smart": {"strategy": "priority", "deployments": deployments},
            "dark": {"deployments": [{"provider": "fc", "model": "m"}]},
        },
    }
    daemon = await start_daemon(config)
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            response = await client.complete("smart", "hi")
            with pytest.raises(TrunklineError) as caught:
                await client.complete("dark", "hi")
    assert response.deployment == "b" and response.fallbacks == []
    assert caught.value.error_class == "unavailable"
    assert "dark/1" in str(caught.value) and "not configured" in str(caught.value)


def otlp_value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [otlp_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind)


async def test_the_span_names_the_route_the_deployment_and_each_fallback(start_daemon, nursery):
    collector = await FakeUpstream().start(nursery)
    accepted = Reply(200, {"content-type": "application/x-protobuf"}, [])
    collector.route("POST", "/v1/traces", accepted)
    collector.route("POST", "/v1/metrics", accepted)
    route = {"strategy": "priority", "b": {"priority": 1}}
    daemon, a, b = await two_deployments(start_daemon, nursery, route, telemetry={"otlp_endpoint": collector.base_url})
    a.route("POST", PATH, OVERLOADED)
    b.route("POST", PATH, cc.answering("from b"))
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            assert (await client.complete("smart", "hi")).deployment == "b"
        assert await daemon.stop() == 0  # its exit sends what the batch holds
    (span,) = [
        span
        for post in collector.sent("/v1/traces")
        for rs in ExportTraceServiceRequest.FromString(post.body).resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]
    attrs = {kv.key: otlp_value(kv.value) for kv in span.attributes}
    assert attrs["trunkline.route"] == "smart" and attrs["trunkline.deployment"] == "b"
    # The provider and model that served it, not those of the deployment that failed.
    assert span.name == "chat model-b" and attrs["gen_ai.request.model"] == "model-b"
    assert attrs["server.port"] == b.port and attrs["gen_ai.provider.name"] == "fb"
    assert attrs["trunkline.fallbacks"] == ["a: rate_limit"]
    (fallback,) = [event for event in span.events if event.name == "trunkline.fallback"]
    assert {kv.key: otlp_value(kv.value) for kv in fallback.attributes} == {
        "trunkline.route": "smart",
        "trunkline.deployment": "a",
        "trunkline.next_deployment": "b",
        "error.type": "rate_limit",
    }
