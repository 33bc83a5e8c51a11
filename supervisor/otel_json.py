"""OTLP/HTTP JSON bodies for spans (`telemetry.otlp_protocol: http/json`).

OTLP defines JSON bodies besides protobuf (hex trace and span ids, enums as
numbers, 64-bit integers as strings), which collectors take on the same
`/v1/traces` path; the OpenTelemetry Python SDK writes protobuf only. msgspec
writes a span about as fast as `otel_proto` builds its protobuf, and a property
test holds both equal to what the SDK's own encoder makes. `otel_http` posts them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan

from .otel_proto import HAS_IS_REMOTE, IS_REMOTE, KIND

_ENCODER = msgspec.json.Encoder()


def any_value(value: Any) -> dict[str, Any]:
    kind = type(value)
    if kind is str:
        return {"stringValue": value}
    if kind is bool:
        return {"boolValue": value}
    if kind is int:
        return {"intValue": str(value)}
    if kind is float:
        return {"doubleValue": value}
    return {"arrayValue": {"values": [any_value(v) for v in value]}}


def key_values(attributes: Any) -> list[dict[str, Any]]:
    return [{"key": key, "value": any_value(value)} for key, value in (attributes or {}).items()]


def span_json(span: ReadableSpan) -> dict[str, Any]:
    context = span.context
    assert context is not None
    parent = span.parent
    out: dict[str, Any] = {
        "traceId": format(context.trace_id, "032x"),
        "spanId": format(context.span_id, "016x"),
        "name": span.name,
        "kind": KIND[span.kind.value],
        "startTimeUnixNano": str(span.start_time),
        "endTimeUnixNano": str(span.end_time),
        "attributes": key_values(span.attributes),
        "flags": HAS_IS_REMOTE | IS_REMOTE if parent is not None and parent.is_remote else HAS_IS_REMOTE,
    }
    if context.trace_state:
        out["traceState"] = context.trace_state.to_header()
    if parent is not None:
        out["parentSpanId"] = format(parent.span_id, "016x")
    if span.events:
        out["events"] = [
            {"timeUnixNano": str(e.timestamp), "name": e.name, "attributes": key_values(e.attributes)}
            for e in span.events
        ]
    # Always present, empty when unset, as the SDK's encoder writes it.
    status: dict[str, Any] = {}
    if span.status.status_code.value:
        status["code"] = span.status.status_code.value
        if span.status.description:
            status["message"] = span.status.description
    out["status"] = status
    return out


def traces_body(spans: Sequence[ReadableSpan]) -> bytes:
    """One `ExportTraceServiceRequest`: the spans grouped by resource and scope."""
    groups: dict[tuple[int, int], tuple[Resource, Any, list[dict[str, Any]]]] = {}
    for span in spans:
        key = (id(span.resource), id(span.instrumentation_scope))
        if key not in groups:
            groups[key] = (span.resource, span.instrumentation_scope, [])
        groups[key][2].append(span_json(span))
    resources: dict[int, dict[str, Any]] = {}
    for resource, scope, items in groups.values():
        entry = resources.get(id(resource))
        if entry is None:
            entry = resources[id(resource)] = {
                "resource": {"attributes": key_values(resource.attributes)},
                "scopeSpans": [],
            }
            if resource.schema_url:
                entry["schemaUrl"] = resource.schema_url
        scope_spans: dict[str, Any] = {"scope": {}, "spans": items}
        if scope is not None:
            scope_spans["scope"] = {"name": scope.name}
            if scope.attributes:
                scope_spans["scope"]["attributes"] = key_values(scope.attributes)
            if scope.version:
                scope_spans["scope"]["version"] = scope.version
            if scope.schema_url:
                scope_spans["schemaUrl"] = scope.schema_url
        entry["scopeSpans"].append(scope_spans)
    return _ENCODER.encode({"resourceSpans": list(resources.values())})
