"""OTLP/JSON spans (`otlp_protocol: http/json`): the body says what the SDK's own protobuf
encoder says for the same spans, for any attributes (property-tested)."""

from __future__ import annotations

import base64
import json
from typing import Any

from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from trunkline.config.loader import TelemetryConfig
from trunkline.supervisor.otel_json import env_headers, env_traces_url, shown, traces_body
from trunkline.supervisor.telemetry import _span_exporter

RESOURCE = Resource.create({"service.name": "trunkline", "service.version": "0.1"})
SCOPE = InstrumentationScope("trunkline", "0.1")

scalars = (st.text(max_size=20) | st.booleans() | st.integers(-(2**63), 2**63 - 1)
           | st.floats(allow_nan=False, allow_infinity=False))
values = scalars | st.lists(st.text(max_size=8), max_size=4) | st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4)
attributes = st.dictionaries(st.text(min_size=1, max_size=30), values, max_size=12)


def span(attrs: dict[str, Any], *, parent: bool, error: bool, events: int) -> ReadableSpan:
    context = SpanContext(0x4BF92F3577B34DA6A3CE929D0E0E4736, 0x00F067AA0BA902B7, is_remote=False,
                          trace_flags=TraceFlags(TraceFlags.SAMPLED), trace_state=TraceState([("vendor", "x1")]))
    return ReadableSpan(
        name="chat claude", context=context, resource=RESOURCE, instrumentation_scope=SCOPE,
        parent=SpanContext(context.trace_id, 0x1122334455667788, is_remote=True) if parent else None,
        attributes=attrs, kind=SpanKind.CLIENT, start_time=1_764_000_000_123_456_789, end_time=1_764_000_001_000_000_000,
        events=tuple(Event("trunkline.retry", {"trunkline.next_attempt": i + 2, "trunkline.wait_s": 0.5},
                           timestamp=1_764_000_000_500_000_000 + i) for i in range(events)),
        status=Status(StatusCode.ERROR, "overloaded") if error else Status(StatusCode.UNSET))


def as_message(body: bytes) -> ExportTraceServiceRequest:
    """OTLP/JSON writes ids in hex; the protobuf JSON parser wants base64 for bytes."""
    data = json.loads(body)
    for rs in data["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in s:
                        s[key] = base64.b64encode(bytes.fromhex(s[key])).decode()
    return json_format.ParseDict(data, ExportTraceServiceRequest())


def official(spans: list[ReadableSpan]) -> ExportTraceServiceRequest:
    message = encode_spans(spans)
    for rs in message.resource_spans:
        for ss in rs.scope_spans:
            for s in ss.spans:
                s.ClearField("flags")  # the SDK's W3C flag bits; OTLP/JSON receivers take spans without them
    return message


@settings(max_examples=200, deadline=None)
@given(attributes, st.booleans(), st.booleans(), st.integers(0, 3))
def test_any_span_is_written_as_the_official_encoder_would(attrs, parent, error, events):
    spans = [span(attrs, parent=parent, error=error, events=events), span({}, parent=False, error=False, events=0)]
    assert as_message(traces_body(spans)) == official(spans)


def test_the_collector_url_and_headers_come_from_config_or_the_otel_variables(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    exporter = _span_exporter(TelemetryConfig(otlp_endpoint="http://c:4318/", otlp_protocol="http/json"))
    assert exporter.url == "http://c:4318/v1/traces"
    exporter.shutdown()
    assert env_traces_url() == "http://localhost:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "https://otlp.example:4318")
    assert env_traces_url() == "https://otlp.example:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://traces.example/in")
    assert env_traces_url() == "https://traces.example/in"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=abc%3D%3D, X-Team = core,broken")
    assert env_headers() == {"x-api-key": "abc==", "x-team": "core"}


def test_a_collector_url_is_logged_without_its_credentials():
    assert shown("https://user:s3cret@otlp.example:4318/v1/traces?api_key=k") == "https://otlp.example:4318/v1/traces"
