"""OpenTelemetry through the real daemon: a caller's trace continues into the daemon's
GenAI span, which a collector on 127.0.0.1 receives over OTLP/HTTP with the retry on it,
with the GenAI metrics and the conventions' schema URL; a collector's transient failure
is sent again; the daemon's log has no line per export."""

from __future__ import annotations

import gzip
import json
import os
import sys
from typing import Any

import pytest
import trio
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider

from fakes.upstream import FakeUpstream, Reply
from helpers import REPO
from trunkline import Client

pytestmark = pytest.mark.e2e

KEY = "fake-anthropic-key-never-to-be-seen-0123456789"
ANSWER = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [{"type": "text", "text": "4"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 14, "output_tokens": 2, "cache_read_input_tokens": 3},
}
OVERLOADED = Reply(
    529,
    {"content-type": "application/json"},
    [b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'],
)
CI_TRACE, CI_SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
ACCEPTED = Reply(200, {"content-type": "application/x-protobuf"}, [])
SCHEMA_URL = "https://opentelemetry.io/schemas/1.41.0"
#: Anthropic streaming two tool calls, as recorded, cut after its first text delta.
TOOLS_SSE = [
    e + b"\n\n" for e in (REPO / "cassettes" / "anthropic" / "tools-parallel.sse").read_bytes().strip().split(b"\n\n")
]


def value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind)


def attributes(items: Any) -> dict[str, Any]:
    return {kv.key: value(kv.value) for kv in items}


@pytest.fixture
async def collector(nursery) -> FakeUpstream:
    fake = await FakeUpstream().start(nursery)
    fake.route("POST", "/v1/traces", ACCEPTED)
    fake.route("POST", "/v1/metrics", ACCEPTED)
    return fake


async def test_a_callers_trace_continues_through_the_daemon_to_the_collector(start_daemon, nursery, collector):
    upstream = await FakeUpstream().start(nursery)
    # The stream's reply waits after its first text delta until the client has that
    # chunk: the rest comes apart from it, however fast or slow the machine.
    release = trio.Event()
    held = Reply(200, {"content-type": "text/event-stream"}, TOOLS_SSE, hold_after=3, release=release)
    upstream.route("POST", "/v1/messages", OVERLOADED, Reply.json(ANSWER), held)
    daemon = await start_daemon(
        {
            "providers": {"anthropic": {"base_url": upstream.base_url}},
            "telemetry": {"otlp_endpoint": collector.base_url},
        },
        env={"ANTHROPIC_API_KEY": KEY},
    )
    tracer = TracerProvider().get_tracer("the caller")
    with trio.fail_after(60):
        async with Client(daemon.runtime_dir) as client:
            with tracer.start_as_current_span("agent turn") as parent:
                answer = await client.complete("anthropic:claude-sonnet-4-5", "2+2?", max_tokens=64)
            async with client.stream("anthropic:claude-sonnet-4-5", "weather in Paris and Rome?") as stream:
                await stream.__anext__()
                release.set()
                streamed = await stream.response()
        # A command run inside a trace (TRACEPARENT in its environment) continues it.
        asked = await trio.run_process(
            [
                sys.executable,
                "-m",
                "trunkline.cli",
                "ask",
                "mock:echo",
                "from a traced job",
                "--runtime-dir",
                str(daemon.runtime_dir),
            ],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**os.environ, "TRACEPARENT": f"00-{CI_TRACE}-{CI_SPAN}-01"},
        )
        assert asked.returncode == 0, asked.stderr
        # The daemon's exit sends what its batch still holds.
        assert await daemon.stop() == 0
    assert answer.text == "4"
    assert all(post.headers["content-type"] == "application/x-protobuf" for post in collector.sent("/v1/traces"))
    assert [
        ss.schema_url
        for post in collector.sent("/v1/traces")
        for rs in ExportTraceServiceRequest.FromString(post.body).resource_spans
        for ss in rs.scope_spans
    ] == [SCHEMA_URL] * len(collector.sent("/v1/traces"))
    spans = [
        span
        for post in collector.sent("/v1/traces")
        for rs in ExportTraceServiceRequest.FromString(post.body).resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]
    assert sorted(span.name for span in spans) == ["chat claude-sonnet-4-5", "chat claude-sonnet-4-5", "chat echo"]
    from_job = next(span for span in spans if span.trace_id.hex() == CI_TRACE)
    assert from_job.parent_span_id.hex() == CI_SPAN and from_job.name == "chat echo"

    context = parent.get_span_context()
    (called,) = [span for span in spans if span.trace_id.hex() == format(context.trace_id, "032x")]
    assert called.trace_id.hex() == format(context.trace_id, "032x")
    assert called.parent_span_id.hex() == format(context.span_id, "016x")
    assert called.kind == called.SPAN_KIND_CLIENT
    a = attributes(called.attributes)
    assert a["gen_ai.provider.name"] == "anthropic" and a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.request.max_tokens"] == 64
    assert a["server.address"] == "127.0.0.1" and a["server.port"] == upstream.port
    assert a["gen_ai.response.id"] == "msg_1" and a["gen_ai.response.model"] == "claude-sonnet-4-5-20250929"
    assert a["gen_ai.response.finish_reasons"] == ["stop"]
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (17, 2)
    assert a["gen_ai.usage.cache_read.input_tokens"] == 3
    assert a["trunkline.attempts"] == 2
    events = [(e.name, attributes(e.attributes)) for e in called.events]
    assert [name for name, _ in events] == ["trunkline.attempt.failed", "trunkline.retry", "trunkline.attempt.started"]
    assert events[0][1]["error.type"] in ("overloaded", "rate_limit", "server_error")
    assert KEY not in str(spans)

    (alone,) = [span for span in spans if span is not called and span is not from_job]
    assert alone.trace_id != called.trace_id and not alone.parent_span_id  # a trace of its own
    a = attributes(alone.attributes)
    assert a["gen_ai.request.stream"] is True and a["gen_ai.response.time_to_first_chunk"] > 0
    # Anthropic's `tool_use` is our `tool_calls`, and the conventions' `tool_call`.
    assert streamed.finish_reason.reason == "tool_calls" and a["gen_ai.response.finish_reasons"] == ["tool_call"]

    scopes = [
        sm
        for post in collector.sent("/v1/metrics")
        for rm in ExportMetricsServiceRequest.FromString(post.body).resource_metrics
        for sm in rm.scope_metrics
    ]
    assert scopes and all(sm.schema_url == SCHEMA_URL for sm in scopes)
    metrics = {m.name: m for sm in scopes for m in sm.metrics}
    assert {
        "gen_ai.client.token.usage",
        "gen_ai.client.operation.duration",
        "gen_ai.client.operation.time_to_first_chunk",
        "gen_ai.client.operation.time_per_output_chunk",
    } <= set(metrics)
    tokens = {
        (attributes(p.attributes)["gen_ai.request.model"], attributes(p.attributes)["gen_ai.token.type"]): p.sum
        for p in metrics["gen_ai.client.token.usage"].histogram.data_points
    }
    usage = streamed.usage
    assert tokens[("claude-sonnet-4-5", "input")] == 17 + usage.input_tokens
    assert tokens[("claude-sonnet-4-5", "output")] == 2 + usage.output_tokens

    def claude(metric: str) -> Any:
        (point,) = [
            p
            for p in metrics[metric].histogram.data_points
            if attributes(p.attributes)["gen_ai.request.model"] == "claude-sonnet-4-5"
        ]
        return point

    # The stream's chunk metrics carry the model that answered, as the others do.
    first, per_chunk = (
        claude("gen_ai.client.operation.time_to_first_chunk"),
        claude("gen_ai.client.operation.time_per_output_chunk"),
    )
    for point in (first, per_chunk):
        assert attributes(point.attributes)["gen_ai.response.model"] == "claude-sonnet-4-5-20250929"
    assert first.count == 1 and metrics["gen_ai.client.operation.time_per_output_chunk"].unit == "s"
    # The rest of the reply came after the client had the first chunk: at least one more chunk.
    assert per_chunk.count >= 1 and per_chunk.sum > 0
    assert "HTTP Request" not in daemon.output()  # no line per export in the daemon's log


async def test_without_telemetry_config_nothing_is_exported(start_daemon, collector):
    daemon = await start_daemon(env={"OTEL_EXPORTER_OTLP_ENDPOINT": collector.base_url})
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            await client.complete("mock:echo", "hi")
        assert await daemon.stop() == 0
    assert collector.requests == []


async def test_spans_go_as_gzipped_otlp_json_when_asked_and_again_when_the_collector_is_busy(start_daemon, collector):
    # A collector shedding load: 503, then 429 (each "try again now"), then it takes the batch.
    collector.route(
        "POST", "/v1/traces", Reply(503, {"retry-after": "0"}, []), Reply(429, {"retry-after": "0"}, []), ACCEPTED
    )
    daemon = await start_daemon(
        {
            "telemetry": {
                "otlp_endpoint": collector.base_url,
                "otlp_protocol": "http/json",
                "otlp_compression": "gzip",
                "metrics": False,
            }
        }
    )
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            with TracerProvider().get_tracer("the caller").start_as_current_span("turn") as parent:
                await client.complete("mock:echo", "hi")
        assert await daemon.stop() == 0
    posts = collector.sent("/v1/traces")
    assert len(posts) == 3 and len({post.body for post in posts}) == 1  # the same batch, sent again
    post = posts[-1]
    assert post.headers["content-type"] == "application/json" and post.headers["content-encoding"] == "gzip"
    body = json.loads(gzip.decompress(post.body))
    assert [ss["schemaUrl"] for rs in body["resourceSpans"] for ss in rs["scopeSpans"]] == [SCHEMA_URL]
    (span,) = [s for rs in body["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    context = parent.get_span_context()
    assert span["name"] == "chat echo" and span["kind"] == 3  # SPAN_KIND_CLIENT
    assert span["traceId"] == format(context.trace_id, "032x")
    assert span["parentSpanId"] == format(context.span_id, "016x")
    usage = {a["key"]: a["value"] for a in span["attributes"]}
    assert usage["gen_ai.provider.name"] == {"stringValue": "mock"} and "intValue" in usage["gen_ai.usage.input_tokens"]
    assert collector.sent("/v1/metrics") == []  # metrics: false
    assert "HTTP Request" not in daemon.output() and "dropped" not in daemon.output()
