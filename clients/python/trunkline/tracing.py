"""The caller's trace context, for the daemon's OpenTelemetry span to join.

A program that traces with OpenTelemetry has imported it, and its current span is
the parent; one that does not pays nothing here, not even the import (the API's
propagators load entry points). Without a current span, the TRACEPARENT and
TRACESTATE environment variables (OpenTelemetry's carriers for a process started
inside a trace, e.g. a CI job or a script run by a traced tool) are the parent.
The daemon takes the W3C fields from `Submit.trace_context`.
"""

from __future__ import annotations

import os
import sys


def current_trace_context() -> dict[str, str]:
    if "opentelemetry.trace" in sys.modules:
        from opentelemetry import propagate, trace

        if trace.get_current_span().get_span_context().is_valid:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            return carrier
    parent = os.environ.get("TRACEPARENT")
    if not parent:
        return {}
    state = os.environ.get("TRACESTATE")
    return {"traceparent": parent, "tracestate": state} if state else {"traceparent": parent}
