"""OTLP span bodies: ours, as protobuf (`otel_proto`, the default) and as JSON (`otel_json`),
say what the SDK's own protobuf encoder says for the same spans, for any attributes
(property-tested)."""

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
from trunkline.supervisor import otel_json, otel_proto
from trunkline.supervisor.otel_http import env_headers, env_traces_url, shown
from trunkline.supervisor.telemetry import SCHEMA_URL, _span_exporter

RESOURCE = Resource.create({"service.name": "trunkline", "service.version": "0.1"})
SCOPE = InstrumentationScope("trunkline", "0.1", schema_url=SCHEMA_URL)
OTHER_RESOURCE = Resource({"service.name": "other"}, schema_url="https://opentelemetry.io/schemas/1.40.0")
OTHER_SCOPE = InstrumentationScope("other")

int64 = st.integers(-(2**63), 2**63 - 1)
doubles = st.floats(allow_nan=False, allow_infinity=False)
scalars = st.text(max_size=20) | st.booleans() | int64 | doubles
values = (
    scalars
    | st.lists(st.text(max_size=8), max_size=4)
    | st.lists(int64, max_size=4)
    | st.lists(doubles, max_size=3)
    | st.lists(st.booleans(), max_size=3)
)
UNSET = Status(StatusCode.UNSET)
attributes = st.dictionaries(st.text(min_size=1, max_size=30), values, max_size=12)


def span(
    attrs: dict[str, Any],
    *,
    parent: str | None = None,
    status: Status = UNSET,
    events: list[dict[str, Any]] = (),
    kind: SpanKind = SpanKind.CLIENT,
    trace_state: bool = True,
    resource: Resource = RESOURCE,
    scope: InstrumentationScope = SCOPE,
) -> ReadableSpan:
    context = SpanContext(
        0x4BF92F3577B34DA6A3CE929D0E0E4736,
        0x00F067AA0BA902B7,
        is_remote=False,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=TraceState([("vendor", "x1")]) if trace_state else None,
    )
    return ReadableSpan(
        name="chat claude",
        context=context,
        resource=resource,
        instrumentation_scope=scope,
        parent=SpanContext(context.trace_id, 0x1122334455667788, is_remote=parent == "remote") if parent else None,
        attributes=attrs,
        kind=kind,
        start_time=1_764_000_000_123_456_789,
        end_time=1_764_000_001_000_000_000,
        events=tuple(
            Event("trunkline.retry", e, timestamp=1_764_000_000_500_000_000 + i) for i, e in enumerate(events)
        ),
        status=status,
    )


def from_json(body: bytes) -> ExportTraceServiceRequest:
    """OTLP/JSON writes ids in hex; the protobuf JSON parser wants base64 for bytes."""
    data = json.loads(body)
    for rs in data["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in s:
                        s[key] = base64.b64encode(bytes.fromhex(s[key])).decode()
    return json_format.ParseDict(data, ExportTraceServiceRequest())


def check(spans: list[ReadableSpan]) -> None:
    official = encode_spans(spans)
    assert ExportTraceServiceRequest.FromString(otel_proto.traces_body(spans)) == official
    assert from_json(otel_json.traces_body(spans)) == official


statuses = st.sampled_from(
    [Status(StatusCode.UNSET), Status(StatusCode.OK), Status(StatusCode.ERROR), Status(StatusCode.ERROR, "overloaded")]
)


@settings(max_examples=200, deadline=None)
@given(
    attributes,
    st.sampled_from([None, "local", "remote"]),
    statuses,
    st.lists(attributes, max_size=3),
    st.sampled_from(list(SpanKind)),
    st.booleans(),
)
def test_any_span_is_written_as_the_official_encoder_would(attrs, parent, status, events, kind, trace_state):
    check(
        [
            span(attrs, parent=parent, status=status, events=events, kind=kind, trace_state=trace_state),
            span({}),
            span({"gen_ai.request.model": "m"}, resource=OTHER_RESOURCE),
            span({}, scope=OTHER_SCOPE),
        ]
    )


def test_the_scope_carries_the_conventions_schema_url_in_both_encodings():
    spans = [span({"gen_ai.operation.name": "chat"})]
    for message in (
        ExportTraceServiceRequest.FromString(otel_proto.traces_body(spans)),
        from_json(otel_json.traces_body(spans)),
    ):
        (scope_spans,) = message.resource_spans[0].scope_spans
        assert scope_spans.schema_url == SCHEMA_URL == "https://opentelemetry.io/schemas/1.41.0"
        assert (scope_spans.scope.name, scope_spans.scope.version) == ("trunkline", "0.1")


def test_the_collector_url_and_headers_come_from_config_or_the_otel_variables(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", raising=False)
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
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-traces=1")
    assert env_headers() == {"x-traces": "1"}  # a signal's own variable wins, whole


def test_a_collector_url_is_logged_without_its_credentials():
    assert shown("https://user:s3cret@otlp.example:4318/v1/traces?api_key=k") == "https://otlp.example:4318/v1/traces"
