"""OpenTelemetry: one GenAI CLIENT span per model call and the GenAI client metrics.

Off unless configured (`telemetry`). The supervisor sees each request from submit
to its terminal event and every bus event its worker publishes, so the span is
opened here, with the caller's trace context (`Submit.trace_context`) as its
parent, and closed when the terminal event is relayed. The worker's attempts
and retries arrive as bus events and become span events, so a retried call is
one span that shows each attempt. Attribute and metric names follow the
OpenTelemetry GenAI semantic conventions; what they do not name is under
`trunkline.*`; the instrumentation scope names the conventions' version
(`SCHEMA_URL`). The SDK samples, numbers and batches the spans, on its own
thread; they are encoded and posted by `otel_http`, the metrics by the SDK's OTLP
exporter. The span is gathered in plain fields and handed over once, and the
histograms are kept in `otel_metrics`, because the SDK's per-call path cost more
than the rest of a request's telemetry together (docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import logging
import os
import time
import urllib.parse
from typing import TYPE_CHECKING, Any

from opentelemetry import propagate
from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, get_current_span

from ..config.base_urls import DEFAULT_BASE_URLS
from ..config.loader import ConfigError
from ..protocol import __version__
from ..protocol.messages import BusEvent, ErrorEvent, Finish, ModelInfo, Response
from .otel_content import finish_reason, input_content, output_content
from .otel_http import OtlpSpanExporter, env_headers, env_tls, env_traces_url, traces_variable
from .otel_metrics import Counts, GenAIHistogram, MetricsExport
from .requests import OTHER_MODEL

if TYPE_CHECKING:
    from ..config.loader import ProviderConfig, TelemetryConfig
    from .requests import RequestState

log = logging.getLogger("trunkline.telemetry")

#: The semantic conventions release whose GenAI attributes and metrics these are: the
#: last before the GenAI conventions moved to a repository of their own, which has
#: published no schema yet.
SCHEMA_URL = "https://opentelemetry.io/schemas/1.41.0"
#: Provider types whose `gen_ai.provider.name` the conventions fix; other providers
#: go by their configured name (`groq`, `deepseek`, `ollama`...).
PROVIDER_NAMES = {"anthropic": "anthropic", "openai": "openai", "gemini": "gcp.gemini"}
#: The conventions' advisory bucket boundaries.
TOKEN_BUCKETS: list[float] = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864]
SECONDS_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92]
#: Seconds one export may take (the SDK's default, 10, would hold a daemon's exit up).
EXPORT_TIMEOUT_S = 4.0
_UNSET = Status(StatusCode.UNSET)


class _OpenSpan:
    """A call's span while it runs: plain fields, made into the SDK's ReadableSpan once,
    at the end (the SDK's live Span cleans and locks every attribute as it is set)."""

    __slots__ = ("attributes", "context", "events", "name", "parent", "start_ns")

    def __init__(self, name: str, context: SpanContext, parent: SpanContext | None, attributes: dict[str, Any]) -> None:
        self.name = name
        self.context = context
        self.parent = parent
        self.start_ns = time.time_ns()
        self.attributes = attributes
        self.events: list[Event] = []


class StreamTimes:
    """A stream's time to its first chunk and the times between its chunks, kept until
    its end: the metrics carry `gen_ai.response.model`, known only then. A chunk is
    what the worker relays at once: each of the provider's chunks as it arrives, or
    those it read together."""

    __slots__ = ("bounds", "first_s", "gaps", "last_at")

    def __init__(self, first_s: float, at: float, bounds: list[float]) -> None:
        self.first_s = first_s
        self.last_at = at
        self.gaps = Counts(len(bounds) + 1)
        self.bounds = bounds

    def arrived(self, now: float) -> None:
        """A chunk after the first, relayed at `now` (trio's clock)."""
        self.gaps.add(now - self.last_at, self.bounds)
        self.last_at = now


class Telemetry:
    """Spans and metrics for the daemon's model calls. Tests hand in their own span
    processor (the SDK's in-memory exporter behind it) and metric exporter; the daemon
    makes OTLP ones."""

    def __init__(
        self,
        config: TelemetryConfig,
        providers: dict[str, ProviderConfig],
        *,
        span_processor: SpanProcessor | None = None,
        metric_exporter: MetricExporter | None = None,
    ) -> None:
        self.capture_content = config.capture_content
        self.providers = {name: _provider_attributes(name, provider) for name, provider in providers.items()}
        self.resource = Resource.create({"service.name": config.service_name, "service.version": __version__})
        self.scope = InstrumentationScope("trunkline", __version__, schema_url=SCHEMA_URL)
        # The TracerProvider brings the sampler and id generator the OTEL_TRACES_SAMPLER
        # and OTEL_PYTHON_ID_GENERATOR variables choose, and shuts the processor down.
        self.tracer_provider: TracerProvider | None = None
        self.spans: SpanProcessor | None = None
        if config.traces:
            self.tracer_provider = TracerProvider(resource=self.resource, shutdown_on_exit=False)
            self.spans = span_processor or BatchSpanProcessor(_span_exporter(config))
            self.tracer_provider.add_span_processor(self.spans)
        self.metrics: MetricsExport | None = None
        if config.metrics:
            self.token_usage = GenAIHistogram(
                "gen_ai.client.token.usage", "{token}", "Input and output tokens used", TOKEN_BUCKETS
            )
            self.duration = GenAIHistogram(
                "gen_ai.client.operation.duration", "s", "GenAI operation duration", SECONDS_BUCKETS
            )
            self.first_chunk = GenAIHistogram(
                "gen_ai.client.operation.time_to_first_chunk",
                "s",
                "Streams: time to the first chunk of the response",
                SECONDS_BUCKETS,
            )
            self.per_chunk = GenAIHistogram(
                "gen_ai.client.operation.time_per_output_chunk",
                "s",
                "Streams: time from each chunk of the response to the next",
                SECONDS_BUCKETS,
            )
            interval = config.metric_interval_s or _env_interval_s()
            self.metrics = MetricsExport(
                [self.token_usage, self.duration, self.first_chunk, self.per_chunk],
                metric_exporter or _metric_exporter(config),
                self.resource,
                self.scope,
                interval,
            )

    def start(self) -> None:
        """Begin the periodic metrics export (the daemon calls it as it starts serving)."""
        if self.metrics is not None:
            self.metrics.start()

    def shutdown(self) -> None:
        """Export what is pending (each export bounded by EXPORT_TIMEOUT_S)."""
        for part in (self.tracer_provider, self.metrics):
            if part is not None:
                try:
                    part.shutdown()
                except Exception as exc:  # noqa: BLE001 - an unreachable collector must not stop a shutdown
                    log.warning("telemetry: could not export at shutdown: %s", exc)

    # -- a request's life ----------------------------------------------------------------

    def started(self, state: RequestState, trace_context: dict[str, str]) -> None:
        job = state.job
        if job is None:
            return
        request = job.request
        attrs = self._common(state, job.model)
        # Metrics are aggregated by their attributes: a model name the catalog does not
        # list is whatever the client wrote, so it is one value there (each name would
        # be a series of its own); the span, which is not aggregated, keeps the name.
        state.otel_attrs = attrs if job.model.in_catalog else {**attrs, "gen_ai.request.model": OTHER_MODEL}
        if self.tracer_provider is None:
            return
        # Each attribute costs its encoding (~1 µs) and its bytes on the wire for every
        # call, so what would only restate a default is left out:
        # a span without `gen_ai.request.stream` was not streamed, one without
        # `trunkline.attempts` took one attempt, and `trunkline.provider` is there
        # only when the configured name differs from `gen_ai.provider.name`.
        span_attrs: dict[str, Any] = {**attrs, "trunkline.request_id": state.request_id}
        if state.stream:
            span_attrs["gen_ai.request.stream"] = True
        if request.response_format is not None and request.response_format.kind != "text":
            span_attrs["gen_ai.output.type"] = "json"
        if state.provider != attrs["gen_ai.provider.name"]:
            span_attrs["trunkline.provider"] = state.provider
        for key, value in (
            ("gen_ai.request.max_tokens", request.max_tokens),
            ("gen_ai.request.temperature", request.temperature),
            ("gen_ai.request.top_p", request.top_p),
            ("gen_ai.request.seed", request.seed),
            ("gen_ai.conversation.id", request.session_id),
        ):
            if value is not None:
                span_attrs[key] = value
        if request.stop_sequences:
            span_attrs["gen_ai.request.stop_sequences"] = list(request.stop_sequences)
        if state.operation_id != state.request_id:
            span_attrs["trunkline.operation_id"] = state.operation_id
        held = state.admission
        if held is not None and held.key:
            span_attrs["trunkline.client_key"] = held.key  # the key's name, never the key
        if self.capture_content:
            span_attrs.update(input_content(request))
        name = f"{attrs['gen_ai.operation.name']} {attrs['gen_ai.request.model']}"
        provider = self.tracer_provider
        parent_context = propagate.extract(trace_context) if trace_context else None
        parent: SpanContext | None = None
        if parent_context is not None:
            parent = get_current_span(parent_context).get_span_context()
            if not parent.is_valid:
                parent, parent_context = None, None
        trace_id = parent.trace_id if parent is not None else provider.id_generator.generate_trace_id()
        sampling = provider.sampler.should_sample(parent_context, trace_id, name, SpanKind.CLIENT, span_attrs)
        if sampling.decision is not Decision.RECORD_AND_SAMPLE:  # the SDK's is_sampled(), which is untyped
            return
        if sampling.attributes:
            span_attrs.update(sampling.attributes)
        context = SpanContext(
            trace_id,
            provider.id_generator.generate_span_id(),
            is_remote=False,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
            trace_state=sampling.trace_state,
        )
        state.span = _OpenSpan(name, context, parent, span_attrs)

    def bus(self, event: BusEvent, state: RequestState | None) -> None:
        """A worker's attempt, retry or rate-limit wait, on the request's span."""
        if state is None or state.span is None:
            return
        span: _OpenSpan = state.span
        name = event.name
        attrs: dict[str, Any]
        if name == "llm.call_started":
            state.attempts = event.attempt or state.attempts + 1
            if state.attempts > 1:  # the first one starts with the span
                span.events.append(Event("trunkline.attempt.started", {"trunkline.attempt": state.attempts}))
        elif name == "llm.call_failed":
            attrs = {"trunkline.attempt": event.attempt or 0, "error.type": event.error_class or "other"}
            if event.detail:
                attrs["exception.message"] = event.detail[:500]
            span.events.append(Event("trunkline.attempt.failed", attrs))
        elif name in ("llm.retrying", "llm.rate_limited"):
            # The worker numbers a retry by the attempt it is about to make.
            attrs = {"trunkline.next_attempt" if name == "llm.retrying" else "trunkline.attempt": event.attempt or 0}
            if event.error_class:
                attrs["error.type"] = event.error_class
            if event.wait_s is not None:
                attrs["trunkline.wait_s"] = event.wait_s
            span.events.append(Event("trunkline.retry" if name == "llm.retrying" else "trunkline.rate_limited", attrs))
        elif name == "route.fallback":
            attrs = {
                "trunkline.route": event.route or "",
                "trunkline.deployment": event.deployment or "",
                "trunkline.next_deployment": event.next_deployment or "",
                "error.type": event.error_class or "other",
            }
            span.events.append(Event("trunkline.fallback", attrs))

    def first_event(self, state: RequestState, seconds: float) -> None:
        """A stream's first chunk, `seconds` after its submit; the daemon then calls
        `state.otel_chunks.arrived` for each later one, while metrics are on."""
        if state.span is not None:
            state.span.attributes["gen_ai.response.time_to_first_chunk"] = seconds
        if self.metrics is not None and state.otel_attrs is not None:
            state.otel_chunks = StreamTimes(seconds, state.submitted_at + seconds, self.per_chunk.bounds)

    def ended(self, state: RequestState, terminal: Any, seconds: float) -> None:
        attrs = state.otel_attrs
        if attrs is None:
            return
        served: dict[str, Any] | None = None
        model = state.resolved
        if state.route is not None and state.route.fallbacks and model is not None:
            # A route's fallback: the provider and the model that served it, not those
            # the request started with (the span's events say which were tried).
            served = self._common(state, model)
            attrs = served if model.in_catalog else {**served, "gen_ai.request.model": OTHER_MODEL}
        error_type = None
        response: Response | None = None
        if type(terminal) is Finish:
            response = terminal.response
        elif type(terminal) is ErrorEvent:
            error_type = terminal.error.error_class
            response = terminal.partial
        else:
            error_type = "other"  # ended without a readable terminal event
        if self.metrics is not None:
            metric_attrs = dict(attrs)
            if response is not None:
                if response.model:
                    metric_attrs["gen_ai.response.model"] = response.model
                usage = response.usage
                self.token_usage.record(usage.input_tokens, {**metric_attrs, "gen_ai.token.type": "input"})
                self.token_usage.record(usage.output_tokens, {**metric_attrs, "gen_ai.token.type": "output"})
            chunks: StreamTimes | None = state.otel_chunks
            if chunks is not None:
                state.otel_chunks = None
                self.first_chunk.record(chunks.first_s, metric_attrs)
                if chunks.gaps.count:
                    self.per_chunk.merge(chunks.gaps, metric_attrs)
            if error_type:
                metric_attrs["error.type"] = error_type
            self.duration.record(seconds, metric_attrs)
        span = state.span
        if span is None or self.spans is None:
            return
        state.span = None
        span_attrs = span.attributes
        name = span.name
        if served is not None:
            span_attrs.update(served)
            span_attrs.pop("trunkline.provider", None)
            if state.provider != served["gen_ai.provider.name"]:
                span_attrs["trunkline.provider"] = state.provider
            name = f"{served['gen_ai.operation.name']} {served['gen_ai.request.model']}"
        if response is not None:
            span_attrs.update(_response_attributes(response))
            if self.capture_content and (response.message.content or type(terminal) is Finish):
                span_attrs["gen_ai.output.messages"] = output_content(response)
        if state.attempts > 1:
            span_attrs["trunkline.attempts"] = state.attempts
        status = _UNSET
        if error_type is not None:
            span_attrs["error.type"] = error_type
            message = terminal.error.message if type(terminal) is ErrorEvent else "ended without a terminal event"
            status = Status(StatusCode.ERROR, message[:500])
        self.spans.on_end(
            ReadableSpan(
                name=name,
                context=span.context,
                parent=span.parent,
                resource=self.resource,
                attributes=span_attrs,
                events=tuple(span.events),
                kind=SpanKind.CLIENT,
                status=status,
                start_time=span.start_ns,
                end_time=time.time_ns(),
                instrumentation_scope=self.scope,
            )
        )

    def _common(self, state: RequestState, model: ModelInfo) -> dict[str, Any]:
        """The attributes both the span and every metric carry."""
        provider = self.providers.get(state.provider) or {"gen_ai.provider.name": state.provider}
        return {
            "gen_ai.operation.name": "generate_content"
            if provider.get("gen_ai.provider.name") == "gcp.gemini"
            else "chat",
            **provider,
            "gen_ai.request.model": model.wire_name or state.model,
        }


def _provider_attributes(name: str, provider: ProviderConfig) -> dict[str, Any]:
    out: dict[str, Any] = {"gen_ai.provider.name": PROVIDER_NAMES.get(provider.type, name)}
    url = provider.resolved_base_url() or DEFAULT_BASE_URLS.get(provider.type, "")
    if url:
        parsed = urllib.parse.urlsplit(url)
        if parsed.hostname:
            out["server.address"] = parsed.hostname
            out["server.port"] = parsed.port or (443 if parsed.scheme == "https" else 80)
    return out


def _response_attributes(response: Response) -> dict[str, Any]:
    usage = response.usage
    out: dict[str, Any] = {
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
    }
    reason = response.finish_reason.reason
    conventional = finish_reason(reason)
    if conventional is not None:
        out["gen_ai.response.finish_reasons"] = [conventional]
    else:  # the conventions have no word for it: ours, under our own name
        out["trunkline.finish_reason"] = reason
    if response.id:
        out["gen_ai.response.id"] = response.id
    if response.model:
        out["gen_ai.response.model"] = response.model
    if response.deployment is not None:
        out["trunkline.deployment"] = response.deployment
        if response.fallbacks:
            out["trunkline.fallbacks"] = [f"{f.deployment}: {f.error_class}" for f in response.fallbacks]
    for key, value in (
        ("gen_ai.usage.cache_read.input_tokens", usage.cache_read_tokens),
        ("gen_ai.usage.cache_creation.input_tokens", usage.cache_write_tokens),
        ("gen_ai.usage.reasoning.output_tokens", usage.reasoning_tokens),
    ):
        if value:
            out[key] = value
    if usage.estimated:
        out["trunkline.usage.estimated"] = True
    if response.cost_usd is not None:
        out["trunkline.cost_usd"] = response.cost_usd
    if response.warnings:
        out["trunkline.warnings"] = [w.code for w in response.warnings]
    return out


# -- exporters ------------------------------------------------------------------------------


def _signal_url(config: TelemetryConfig, signal: str) -> str | None:
    """The config's collector URL for one signal; None leaves it to the OTEL_* variables."""
    if config.otlp_endpoint is None:
        return None
    return f"{config.otlp_endpoint.rstrip('/')}/v1/{signal}"


def _env_interval_s() -> float:
    """OTEL_METRIC_EXPORT_INTERVAL (milliseconds), else 60 s."""
    raw = os.environ.get("OTEL_METRIC_EXPORT_INTERVAL")
    try:
        value = float(raw) / 1000 if raw else 60.0
    except ValueError:
        value = 0.0
    if not 0 < value <= 86400:
        raise ConfigError(
            f"telemetry: OTEL_METRIC_EXPORT_INTERVAL={raw!r} is not a number of milliseconds in (0, 86400000]"
        )
    return value


def otlp_protocol(config: TelemetryConfig) -> str:
    chosen = config.otlp_protocol or traces_variable("PROTOCOL") or "http/protobuf"
    if chosen not in ("http/protobuf", "http/json"):
        raise ConfigError(
            f"telemetry: the OTLP protocol {chosen!r} is not supported; use http/protobuf or "
            "http/json (OTLP over HTTP, usually port 4318)"
        )
    return chosen


def otlp_compression(config: TelemetryConfig, signal: str) -> str:
    """gzip or none: the config's, else the signal's OTEL_EXPORTER_OTLP_*_COMPRESSION, else
    OTEL_EXPORTER_OTLP_COMPRESSION."""
    chosen = (
        (
            config.otlp_compression
            or os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_COMPRESSION")
            or os.environ.get("OTEL_EXPORTER_OTLP_COMPRESSION")
            or "none"
        )
        .strip()
        .lower()
    )
    if chosen not in ("gzip", "none"):
        raise ConfigError(f"telemetry: the OTLP compression {chosen!r} is not supported; use gzip or none")
    return chosen


def _span_exporter(config: TelemetryConfig) -> OtlpSpanExporter:
    try:
        tls = env_tls()
    except OSError as exc:  # ssl.SSLError is one too
        raise ConfigError(
            f"telemetry: cannot load the certificate an OTEL_EXPORTER_OTLP_*CERTIFICATE or "
            f"*CLIENT_KEY variable names: {exc}"
        ) from None
    return OtlpSpanExporter(
        _signal_url(config, "traces") or env_traces_url(),
        config.otlp_headers or env_headers(),
        EXPORT_TIMEOUT_S,
        protocol=otlp_protocol(config),
        compression=otlp_compression(config, "traces"),
        tls=tls,
    )


def _metric_exporter(config: TelemetryConfig) -> Any:
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    gzip = otlp_compression(config, "metrics") == "gzip"
    return OTLPMetricExporter(
        endpoint=_signal_url(config, "metrics"),
        headers=config.otlp_headers or None,
        timeout=EXPORT_TIMEOUT_S,
        compression=Compression.Gzip if gzip else Compression.NoCompression,
    )
