"""OpenTelemetry: the span and metrics of a model call, read back with the SDK's
in-memory exporter and reader."""

from __future__ import annotations

import json
import urllib.parse
from typing import Any, get_args

import pytest
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from trunkline.config.loader import Config, ConfigError, ProviderConfig, TelemetryConfig
from trunkline.protocol import codec
from trunkline.protocol.codec import DecodeError
from trunkline.protocol.messages import (
    BusEvent,
    ErrorEvent,
    ErrorInfo,
    Finish,
    FinishReason,
    FinishReasonName,
    ImagePart,
    Job,
    Message,
    ModelInfo,
    Request,
    Response,
    Submit,
    Tool,
    ToolCallPart,
    Usage,
)
from trunkline.supervisor.daemon import _telemetry
from trunkline.supervisor.requests import RequestState
from trunkline.supervisor.router import trace_context_problem
from trunkline.supervisor.telemetry import SCHEMA_URL, SECONDS_BUCKETS, Telemetry

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
#: The GenAI conventions' FinishReason values (gen-ai-output-messages.json, semconv 1.41.0).
CONVENTIONS_FINISH_REASONS = {"stop", "length", "content_filter", "tool_call", "error"}
PROVIDERS = {
    "anthropic": ProviderConfig(type="anthropic"),
    "local": ProviderConfig(type="openai_compat", base_url="http://10.0.0.5:8000/v1"),
}


class Harness:
    def __init__(self, **config: Any) -> None:
        self.spans = InMemorySpanExporter()
        self.telemetry = Telemetry(
            TelemetryConfig(enabled=True, **config),
            PROVIDERS,
            span_processor=SimpleSpanProcessor(self.spans),
            metric_exporter=ConsoleMetricExporter(),
        )

    def start(
        self,
        request: Request,
        *,
        provider: str = "anthropic",
        wire_name: str = "claude-sonnet-4-5",
        stream: bool = True,
        trace_context: dict[str, str] | None = None,
        listed: bool = True,
    ) -> RequestState:
        model = ModelInfo(id=f"{provider}:{wire_name}", provider=provider, wire_name=wire_name, in_catalog=listed)
        state = RequestState("req-1", "c1", provider, model.id, stream, "op-1", 100, 0.0)
        state.job = Job(
            request_id="req-1", client_id="c1", request=request, model=model, operation_id="op-1", stream=stream
        )
        self.telemetry.started(state, trace_context or {})
        return state

    def span(self) -> Any:
        (span,) = self.spans.get_finished_spans()
        return span

    def metrics(self) -> dict[str, list[Any]]:
        assert self.telemetry.metrics is not None
        data = self.telemetry.metrics.data()
        assert data is not None
        out: dict[str, list[Any]] = {}
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    out[metric.name] = list(metric.data.data_points)
        return out


def bus(name: str, **fields: Any) -> BusEvent:
    return BusEvent(name=name, request_id="req-1", provider="anthropic", **fields)


def answer(**usage: int) -> Finish:
    return Finish(
        response=Response(
            id="msg_01",
            model="claude-sonnet-4-5-20250929",
            provider="anthropic",
            message=Message.assistant("Paris."),
            finish_reason=FinishReason(reason="stop", raw="end_turn"),
            usage=Usage(**usage),
            cost_usd=0.0012,
        )
    )


def test_a_retried_call_is_one_client_span_in_the_callers_trace_with_each_attempt_on_it():
    h = Harness()
    request = Request(
        model="anthropic:claude-sonnet-4-5",
        messages=[Message.user("Capital of France?")],
        max_tokens=256,
        temperature=0.2,
        top_p=0.9,
        session_id="conv-7",
    )
    state = h.start(request, trace_context={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
    h.telemetry.bus(bus("llm.call_started", attempt=1), state)
    h.telemetry.bus(bus("llm.call_failed", attempt=1, error_class="overloaded", detail="529 Overloaded"), state)
    h.telemetry.bus(bus("llm.retrying", attempt=2, error_class="overloaded", wait_s=0.5), state)
    h.telemetry.bus(bus("llm.call_started", attempt=2), state)
    h.telemetry.first_event(state, 0.25)
    h.telemetry.ended(
        state,
        answer(input_tokens=12, output_tokens=3, cache_read_tokens=8, cache_write_tokens=2, reasoning_tokens=1),
        1.5,
    )

    span = h.span()
    assert span.name == "chat claude-sonnet-4-5"
    assert span.kind is SpanKind.CLIENT
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert format(span.parent.span_id, "016x") == PARENT_ID
    a = span.attributes
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.provider.name"] == "anthropic"
    assert a["gen_ai.request.model"] == "claude-sonnet-4-5"
    assert (a["gen_ai.request.max_tokens"], a["gen_ai.request.temperature"], a["gen_ai.request.top_p"]) == (
        256,
        0.2,
        0.9,
    )
    assert a["gen_ai.conversation.id"] == "conv-7"
    assert (a["server.address"], a["server.port"]) == ("api.anthropic.com", 443)
    assert a["gen_ai.response.id"] == "msg_01" and a["gen_ai.response.model"] == "claude-sonnet-4-5-20250929"
    assert tuple(a["gen_ai.response.finish_reasons"]) == ("stop",)
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (12, 3)
    assert a["gen_ai.usage.cache_read.input_tokens"] == 8
    assert a["gen_ai.usage.cache_creation.input_tokens"] == 2
    assert a["gen_ai.usage.reasoning.output_tokens"] == 1
    assert a["gen_ai.response.time_to_first_chunk"] == 0.25
    assert a["trunkline.attempts"] == 2 and a["trunkline.cost_usd"] == 0.0012
    assert "error.type" not in a and span.status.status_code is StatusCode.UNSET
    events = [(e.name, dict(e.attributes)) for e in span.events]
    assert events == [
        (
            "trunkline.attempt.failed",
            {"trunkline.attempt": 1, "error.type": "overloaded", "exception.message": "529 Overloaded"},
        ),
        ("trunkline.retry", {"trunkline.next_attempt": 2, "error.type": "overloaded", "trunkline.wait_s": 0.5}),
        ("trunkline.attempt.started", {"trunkline.attempt": 2}),
    ]
    # Contents are not captured unless asked for.
    assert not any(key.startswith(("gen_ai.input", "gen_ai.output.messages", "gen_ai.system")) for key in a)


def test_the_genai_metrics_carry_tokens_duration_and_time_to_first_chunk():
    h = Harness()
    state = h.start(Request(model="anthropic:claude-sonnet-4-5", messages=[Message.user("hi")]))
    h.telemetry.first_event(state, 0.3)
    h.telemetry.ended(state, answer(input_tokens=40, output_tokens=7), 2.0)
    m = h.metrics()
    tokens = {p.attributes["gen_ai.token.type"]: p for p in m["gen_ai.client.token.usage"]}
    assert (tokens["input"].sum, tokens["output"].sum) == (40, 7)
    assert tokens["input"].attributes["gen_ai.response.model"] == "claude-sonnet-4-5-20250929"
    assert tokens["input"].attributes["gen_ai.request.model"] == "claude-sonnet-4-5"
    assert list(tokens["input"].explicit_bounds[:4]) == [1, 4, 16, 64]
    assert tokens["input"].bucket_counts[3] == 1 == sum(tokens["input"].bucket_counts)  # 40 is in (16, 64]
    (duration,) = m["gen_ai.client.operation.duration"]
    assert (duration.count, duration.sum) == (1, 2.0) and "error.type" not in duration.attributes
    (first,) = m["gen_ai.client.operation.time_to_first_chunk"]
    assert (first.count, first.sum) == (1, 0.3)


def test_a_streams_chunks_are_timed_one_from_the_next_with_the_response_model():
    h = Harness()
    state = h.start(Request(model="anthropic:claude-sonnet-4-5", messages=[Message.user("hi")]))
    state.submitted_at = 100.0  # trio's clock at submit
    h.telemetry.first_event(state, 0.5)
    for at in (100.55, 100.65, 100.65, 103.0):  # as the daemon relays each later chunk
        state.otel_chunks.arrived(at)
    h.telemetry.ended(state, answer(input_tokens=4, output_tokens=9), 3.0)
    m = h.metrics()
    (per_chunk,) = m["gen_ai.client.operation.time_per_output_chunk"]
    assert per_chunk.count == 4 and per_chunk.sum == pytest.approx(2.5)
    assert (per_chunk.min, per_chunk.max) == (0.0, pytest.approx(2.35))
    assert (
        list(per_chunk.explicit_bounds)
        == SECONDS_BUCKETS
        == [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
    )
    # 0.05 s in (0.04, 0.08], 0.1 s in (0.08, 0.16], 0 s in the first bucket, 2.35 s in (1.28, 2.56].
    assert [i for i, n in enumerate(per_chunk.bucket_counts) for _ in range(n)] == [0, 3, 4, 8]
    (first,) = m["gen_ai.client.operation.time_to_first_chunk"]
    for point in (per_chunk, first):
        assert dict(point.attributes) == {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "anthropic",
            "server.address": "api.anthropic.com",
            "server.port": 443,
            "gen_ai.request.model": "claude-sonnet-4-5",
            "gen_ai.response.model": "claude-sonnet-4-5-20250929",
        }
    assert state.otel_chunks is None


def test_a_whole_response_has_no_chunk_metrics_and_a_one_chunk_stream_no_time_per_chunk():
    h = Harness()
    h.telemetry.ended(
        h.start(Request(model="anthropic:claude-sonnet-4-5", messages=[Message.user("hi")]), stream=False),
        answer(),
        1.0,
    )
    assert "gen_ai.client.operation.time_to_first_chunk" not in h.metrics()
    state = h.start(Request(model="anthropic:claude-sonnet-4-5", messages=[Message.user("hi")]))
    h.telemetry.first_event(state, 0.2)
    h.telemetry.ended(state, ErrorEvent(error=ErrorInfo(error_class="overloaded", message="busy")), 0.2)
    m = h.metrics()
    (first,) = m["gen_ai.client.operation.time_to_first_chunk"]
    assert first.count == 1 and "error.type" not in first.attributes  # not one of this metric's attributes
    assert "gen_ai.client.operation.time_per_output_chunk" not in m


@pytest.mark.parametrize("reason", get_args(FinishReasonName))
def test_every_finish_reason_on_a_span_is_one_of_the_conventions(reason: str):
    h = Harness(capture_content=True)
    state = h.start(Request(model="anthropic:claude-sonnet-4-5", messages=[Message.user("hi")]))
    done = answer()
    done.response.finish_reason = FinishReason(reason=reason)
    h.telemetry.ended(state, done, 0.1)
    a = h.span().attributes
    if reason in ("cancelled", "other"):  # the conventions have no word for these: ours, under our name
        assert "gen_ai.response.finish_reasons" not in a and a["trunkline.finish_reason"] == reason
        return
    (conventional,) = a["gen_ai.response.finish_reasons"]
    assert conventional in CONVENTIONS_FINISH_REASONS
    assert conventional == ("tool_call" if reason == "tool_calls" else reason)
    assert json.loads(a["gen_ai.output.messages"])[0]["finish_reason"] == conventional


def test_spans_and_metrics_name_the_conventions_schema():
    h = Harness()
    state = h.start(Request(model="anthropic:claude-sonnet-4-5", messages=[Message.user("hi")]))
    h.telemetry.ended(state, answer(), 0.1)
    assert h.span().instrumentation_scope.schema_url == SCHEMA_URL
    assert h.telemetry.metrics is not None
    data = h.telemetry.metrics.data()
    assert data is not None
    (scope_metrics,) = data.resource_metrics[0].scope_metrics
    assert scope_metrics.scope.schema_url == scope_metrics.schema_url == SCHEMA_URL
    (encoded,) = encode_metrics(data).resource_metrics[0].scope_metrics  # as the OTLP exporter sends it
    assert encoded.schema_url == SCHEMA_URL


@pytest.mark.parametrize("kind", ["anthropic", "openai", "gemini", "ollama", "openai_compat", "mock"])
def test_a_span_names_the_server_the_providers_worker_calls_when_its_config_gives_no_url(kind: str):
    from trunkline.workers._runtime import adapter_class  # the test may load a worker; the supervisor may not

    called = getattr(adapter_class(kind), "default_base_url", "")  # the mock has none: it calls nothing
    h = Harness()
    h.telemetry = Telemetry(
        TelemetryConfig(enabled=True, metrics=False),
        {"p": ProviderConfig(type=kind)},
        span_processor=SimpleSpanProcessor(h.spans),
    )
    state = h.start(Request(model="p:m", messages=[Message.user("hi")]), provider="p", wire_name="m")
    h.telemetry.ended(state, answer(), 0.1)
    a = h.span().attributes
    if called:
        host = urllib.parse.urlsplit(called)
        port = host.port or (443 if host.scheme == "https" else 80)
        assert (a["server.address"], a["server.port"]) == (host.hostname, port), called
    else:  # nothing called without a configured URL: no server to name
        assert "server.address" not in a and "server.port" not in a


def test_a_failed_call_is_an_error_span_with_its_class_and_its_partial_usage():
    h = Harness()
    state = h.start(
        Request(model="local:qwen3", messages=[Message.user("hi")]), provider="local", wire_name="qwen3", stream=False
    )
    partial = Response(model="qwen3", usage=Usage(input_tokens=5, output_tokens=2, estimated=True))
    h.telemetry.ended(
        state, ErrorEvent(error=ErrorInfo(error_class="timeout", message="idle for 30s"), partial=partial), 30.0
    )
    span = h.span()
    assert span.status.status_code is StatusCode.ERROR and span.status.description == "idle for 30s"
    a = span.attributes
    assert a["error.type"] == "timeout" and a["gen_ai.provider.name"] == "local"
    assert (a["server.address"], a["server.port"]) == ("10.0.0.5", 8000)
    assert "gen_ai.request.stream" not in a and a["trunkline.usage.estimated"] is True
    assert "trunkline.provider" not in a and "trunkline.attempts" not in a  # named as gen_ai.provider.name; one attempt
    assert span.parent is None  # no trace context: a trace of its own
    (duration,) = h.metrics()["gen_ai.client.operation.duration"]
    assert duration.attributes["error.type"] == "timeout"


def test_contents_are_on_the_span_only_when_opted_in():
    h = Harness(capture_content=True)
    request = Request(
        model="anthropic:claude-sonnet-4-5",
        messages=[
            Message.system("Be brief."),
            Message.user("What is in this picture?", ImagePart(data="aGVsbG8=", media_type="image/png")),
            Message.assistant(ToolCallPart(id="tu_1", name="look", arguments={"zoom": 2})),
            Message.tool_result("tu_1", "a cat"),
        ],
        tools=[Tool(name="look", description="Look closer")],
    )
    state = h.start(request)
    h.telemetry.ended(state, answer(input_tokens=1, output_tokens=1), 0.5)
    a = h.span().attributes
    assert json.loads(a["gen_ai.system_instructions"]) == [{"type": "text", "content": "Be brief."}]
    messages = json.loads(a["gen_ai.input.messages"])
    assert messages[0] == {
        "role": "user",
        "parts": [
            {"type": "text", "content": "What is in this picture?"},
            {"type": "blob", "modality": "image", "mime_type": "image/png"},
        ],
    }  # never the bytes
    assert messages[1]["parts"] == [{"type": "tool_call", "id": "tu_1", "name": "look", "arguments": {"zoom": 2}}]
    assert messages[2] == {"role": "tool", "parts": [{"type": "tool_call_response", "id": "tu_1", "response": "a cat"}]}
    assert json.loads(a["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "Paris."}], "finish_reason": "stop"}
    ]
    assert json.loads(a["gen_ai.tool.definitions"])[0]["name"] == "look"


def test_an_unreadable_trace_context_starts_a_new_trace():
    h = Harness()
    state = h.start(
        Request(model="anthropic:claude-sonnet-4-5", messages=[Message.user("hi")]),
        trace_context={"traceparent": "not a traceparent"},
    )
    h.telemetry.ended(state, answer(), 0.1)
    assert h.span().parent is None


def test_telemetry_is_off_unless_configured(monkeypatch: pytest.MonkeyPatch):
    assert _telemetry(Config(), {}) is None
    on = Config(telemetry=TelemetryConfig(otlp_endpoint="http://127.0.0.1:9", metrics=False))
    telemetry = _telemetry(on, {})
    assert telemetry is not None and telemetry.tracer_provider is not None and telemetry.metrics is None
    telemetry.shutdown()  # nothing batched: nothing sent
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert _telemetry(on, {}) is None


def test_an_otlp_protocol_the_daemon_cannot_speak_is_a_config_error(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.raises(ConfigError, match="'grpc' is not supported; use http/protobuf or http/json"):
        _telemetry(Config(telemetry=TelemetryConfig(enabled=True)), {})


def test_an_unreadable_metric_interval_in_the_environment_is_a_config_error(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "5s")
    with pytest.raises(ConfigError, match="OTEL_METRIC_EXPORT_INTERVAL='5s' is not a number of milliseconds"):
        _telemetry(Config(telemetry=TelemetryConfig(enabled=True, traces=False)), {})


def test_too_much_trace_context_is_refused_and_a_usual_one_is_not():
    usual = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01", "tracestate": "vendor=abc", "baggage": "user=1"}
    assert trace_context_problem(usual) is None
    with pytest.raises(DecodeError, match="length <= 8"):  # counted as the submit is read
        codec.decode_control_request(
            codec.encode(
                Submit(
                    request_id="r",
                    client_id="c",
                    request=Request(model="mock:echo", messages=[]),
                    trace_context={f"k{i}": "v" for i in range(9)},
                )
            )
        )
    assert "too long" in (trace_context_problem({"baggage": "x" * 9000}) or "")


def test_a_model_the_catalog_does_not_list_is_one_metric_value_and_named_on_its_span():
    """A pass-through name is whatever the client wrote: each would be a series of its
    own in every metric, so metrics say `other`; the span keeps the name."""
    h = Harness()
    for name in ("made-up-1", "made-up-2" * 300):
        state = h.start(Request(model=f"anthropic:{name}", messages=[Message.user("x")]), wire_name=name, listed=False)
        h.telemetry.ended(state, answer(input_tokens=1, output_tokens=1), 0.1)
    assert {s.attributes["gen_ai.request.model"] for s in h.spans.get_finished_spans()} == {
        "made-up-1",
        "made-up-2" * 300,
    }
    for points in h.metrics().values():
        assert {p.attributes["gen_ai.request.model"] for p in points} == {"other"}
