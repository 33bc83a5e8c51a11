"""The caller's OpenTelemetry trace context, for the daemon's span to join.

A program that traces with OpenTelemetry has imported it; one that does not pays
nothing here, not even the import (the API's propagators load entry points).
The daemon takes the W3C fields (`traceparent`, `tracestate`, `baggage`) from
`Submit.trace_context`; with no active span there is nothing to send.
"""

from __future__ import annotations

import sys


def current_trace_context() -> dict[str, str]:
    if "opentelemetry.trace" not in sys.modules:
        return {}
    from opentelemetry import propagate, trace

    if not trace.get_current_span().get_span_context().is_valid:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier
