"""The trace context the Python client sends with each request (Submit.trace_context)."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider

from trunkline.tracing import current_trace_context

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_nothing_is_sent_outside_a_trace(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("TRACEPARENT", raising=False)
    assert current_trace_context() == {}


def test_the_current_span_is_the_parent_even_with_traceparent_in_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TRACEPARENT", PARENT)
    with TracerProvider().get_tracer("t").start_as_current_span("step") as span:
        sent = current_trace_context()
    context = span.get_span_context()
    assert sent["traceparent"].startswith(f"00-{context.trace_id:032x}-{context.span_id:016x}-")


def test_a_process_started_inside_a_trace_continues_it(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TRACEPARENT", PARENT)
    monkeypatch.setenv("TRACESTATE", "ci=1")
    assert current_trace_context() == {"traceparent": PARENT, "tracestate": "ci=1"}
