"""OTLP/HTTP with JSON bodies (`telemetry.otlp_protocol: http/json`) for spans.

The OpenTelemetry Python SDK exports OTLP as protobuf only, and building the
protobuf messages costs ~6 µs per span attribute: with every call traced, more
than all the rest of the daemon's telemetry. OTLP also defines JSON bodies
(hex trace and span ids, enums as numbers, 64-bit integers as strings), which
collectors take on the same `/v1/traces` path; msgspec writes them about six
times faster. The spans still come from the SDK's batch processor; this is the
exporter at its end, posting with httpx.
"""

from __future__ import annotations

import logging
import os
import urllib.parse
from collections.abc import Sequence
from typing import Any

import httpx
import msgspec
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

log = logging.getLogger("trunkline.telemetry")

_ENCODER = msgspec.json.Encoder()
#: OTLP's span kind numbers, by the SDK's SpanKind values (INTERNAL, SERVER, CLIENT,
#: PRODUCER, CONSUMER); status codes are the same numbers in both.
_KIND = {0: 1, 1: 2, 2: 3, 3: 4, 4: 5}


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
    out: dict[str, Any] = {
        "traceId": format(context.trace_id, "032x"),
        "spanId": format(context.span_id, "016x"),
        "name": span.name,
        "kind": _KIND[span.kind.value],
        "startTimeUnixNano": str(span.start_time),
        "endTimeUnixNano": str(span.end_time),
        "attributes": key_values(span.attributes),
    }
    if context.trace_state:
        out["traceState"] = context.trace_state.to_header()
    if span.parent is not None:
        out["parentSpanId"] = format(span.parent.span_id, "016x")
    if span.events:
        out["events"] = [{"timeUnixNano": str(e.timestamp), "name": e.name, "attributes": key_values(e.attributes)}
                         for e in span.events]
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
            entry = resources[id(resource)] = {"resource": {"attributes": key_values(resource.attributes)},
                                               "scopeSpans": []}
        scope_json = {"name": scope.name, **({"version": scope.version} if scope.version else {})} if scope else {}
        entry["scopeSpans"].append({"scope": scope_json, "spans": items})
    return _ENCODER.encode({"resourceSpans": list(resources.values())})


def shown(url: str) -> str:
    """A URL for a log line: without the user, password or query it may carry."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"


class JsonSpanExporter(SpanExporter):
    """Posts each batch the SDK's processor hands over; a failure drops the batch
    with a warning (never a request's concern)."""

    def __init__(self, url: str, headers: dict[str, str], timeout_s: float) -> None:
        self.url = url
        self.http = httpx.Client(timeout=timeout_s, headers={**headers, "content-type": "application/json"})

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            reply = self.http.post(self.url, content=traces_body(spans))
        except httpx.HTTPError as exc:
            log.warning("telemetry: could not send %d spans to %s: %s", len(spans), shown(self.url),
                        type(exc).__name__)
            return SpanExportResult.FAILURE
        if reply.status_code >= 300:
            log.warning("telemetry: the collector at %s answered %d to %d spans", shown(self.url),
                        reply.status_code, len(spans))
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.http.close()


def env_traces_url() -> str:
    """Where spans go when the config names no collector: the OTEL_EXPORTER_OTLP_*
    variables, as the SDK's exporters read them (a signal's own variable is the whole URL)."""
    whole = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if whole:
        return whole
    return f"{os.environ.get('OTEL_EXPORTER_OTLP_ENDPOINT', 'http://localhost:4318').rstrip('/')}/v1/traces"


def env_headers() -> dict[str, str]:
    """OTEL_EXPORTER_OTLP_TRACES_HEADERS or OTEL_EXPORTER_OTLP_HEADERS: `k=v,k2=v2`, URL-encoded."""
    raw = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or os.environ.get("OTEL_EXPORTER_OTLP_HEADERS") or ""
    out: dict[str, str] = {}
    for item in raw.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            out[urllib.parse.unquote(key.strip()).lower()] = urllib.parse.unquote(value.strip())
    return out
