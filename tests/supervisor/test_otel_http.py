"""The OTLP/HTTP span exporter against a collector played by httpx's MockTransport: what
it sends, which failures it sends again and when (its clock and waits are the test's:
no real sleep), what it logs."""

from __future__ import annotations

import email.utils
import gzip
import logging
from collections.abc import Callable

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind

from trunkline.config.loader import ConfigError, TelemetryConfig
from trunkline.supervisor.otel_http import MAX_SENDS, OtlpSpanExporter
from trunkline.supervisor.telemetry import _span_exporter, otlp_compression

URL = "https://user:pa55word@collector.example:4318/v1/traces?token=t0ken"
SHOWN = "https://collector.example:4318/v1/traces"
SPANS = [
    ReadableSpan(
        name="chat m",
        context=SpanContext(1, 2, is_remote=False),
        kind=SpanKind.CLIENT,
        resource=Resource({"service.name": "trunkline"}),
        instrumentation_scope=InstrumentationScope("t"),
        attributes={"gen_ai.request.model": "m"},
        start_time=1,
        end_time=2,
    )
]


class Collector:
    """Answers each post with the next reply of its script (the last one repeats), and
    keeps what it was sent and when, on the exporter's clock."""

    def __init__(self, *replies: httpx.Response | Exception) -> None:
        self.replies = list(replies)
        self.now = 1_000_000.0
        self.posts: list[tuple[float, httpx.Request]] = []
        self.waits: list[float] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.posts.append((self.now, request))
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if isinstance(reply, Exception):
            raise reply
        return reply

    def wait(self, seconds: float) -> bool:
        self.waits.append(seconds)
        self.now += seconds
        return False

    def exporter(
        self, *, timeout_s: float = 4.0, jitter: Callable[[], float] = lambda: 1.0, **options: object
    ) -> OtlpSpanExporter:
        return OtlpSpanExporter(
            URL,
            {"x-api-key": "s3cret"},
            timeout_s,
            transport=httpx.MockTransport(self.handle),
            clock=lambda: self.now,
            wait=self.wait,
            jitter=jitter,
            **options,
        )  # type: ignore[arg-type]

    @property
    def times(self) -> list[float]:
        return [at - 1_000_000.0 for at, _ in self.posts]


def status(code: int, **headers: str) -> httpx.Response:
    return httpx.Response(code, headers=headers)


def test_a_protobuf_batch_is_posted_once_and_logged_at_debug_only(caplog: pytest.LogCaptureFixture):
    collector = Collector(status(200))
    with caplog.at_level(logging.DEBUG):
        assert collector.exporter().export(SPANS) is SpanExportResult.SUCCESS
    ((_, request),) = collector.posts
    assert request.headers["content-type"] == "application/x-protobuf"
    assert request.headers["x-api-key"] == "s3cret"
    assert "content-encoding" not in request.headers
    (span,) = ExportTraceServiceRequest.FromString(request.content).resource_spans[0].scope_spans[0].spans
    assert span.name == "chat m"
    # httpx's INFO line (with the URL's credentials) is not there; ours is a debug line.
    assert [
        (r.name, r.levelno, r.getMessage()) for r in caplog.records if r.name.startswith(("trunkline", "httpx"))
    ] == [("trunkline.telemetry", logging.DEBUG, f"telemetry: 1 spans sent to {SHOWN}")]


def test_gzip_compression_sends_the_same_body_gzipped():
    collector = Collector(status(200))
    assert collector.exporter(compression="gzip", protocol="http/json").export(SPANS) is SpanExportResult.SUCCESS
    ((_, request),) = collector.posts
    assert request.headers["content-encoding"] == "gzip" and request.headers["content-type"] == "application/json"
    assert b'"name":"chat m"' in gzip.decompress(request.content)


def test_transient_failures_are_sent_again_after_an_exponential_backoff():
    collector = Collector(status(503), status(502), httpx.ConnectError("refused"), status(200))
    assert collector.exporter(timeout_s=30).export(SPANS) is SpanExportResult.SUCCESS
    assert collector.waits == [1.0, 2.0, 4.0]
    assert collector.times == [0.0, 1.0, 3.0, 7.0]
    assert len({request.content for _, request in collector.posts}) == 1  # the same batch each time


def test_the_backoff_has_jitter_of_a_fifth_either_way():
    collector = Collector(status(504), status(429), status(200))
    assert collector.exporter(timeout_s=30, jitter=lambda: 0.8).export(SPANS) is SpanExportResult.SUCCESS
    assert collector.waits == pytest.approx([0.8, 1.6])
    collector = Collector(status(504), status(504), status(200))
    exporter = OtlpSpanExporter(
        URL, {}, 30, transport=httpx.MockTransport(collector.handle), clock=lambda: collector.now, wait=collector.wait
    )  # the real jitter
    assert exporter.export(SPANS) is SpanExportResult.SUCCESS
    assert 0.8 <= collector.waits[0] <= 1.2 and 1.6 <= collector.waits[1] <= 2.4


def test_retry_after_is_honoured_in_seconds_or_as_a_date():
    collector = Collector(status(429, **{"retry-after": "3"}), status(200))
    assert collector.exporter().export(SPANS) is SpanExportResult.SUCCESS
    assert collector.waits == [3.0]
    later = email.utils.formatdate(Collector().now + 2.0, usegmt=True)  # the clock starts on a whole second
    collector = Collector(status(503, **{"retry-after": later}), status(200))
    assert collector.exporter().export(SPANS) is SpanExportResult.SUCCESS
    assert collector.waits == [2.0]
    collector = Collector(status(503, **{"retry-after": "soon"}), status(200))  # unreadable: the backoff
    assert collector.exporter().export(SPANS) is SpanExportResult.SUCCESS
    assert collector.waits == [1.0]


def test_retries_stop_at_the_export_timeout_and_the_drop_is_one_warning(caplog: pytest.LogCaptureFixture):
    collector = Collector(status(503))
    with caplog.at_level(logging.INFO):
        assert collector.exporter(timeout_s=4).export(SPANS) is SpanExportResult.FAILURE
    # Sent at 0, 1 and 3 s: the next wait (4 s) would end past the 4 s timeout.
    assert collector.times == [0.0, 1.0, 3.0]
    # Each send may take what is left of the timeout, no more.
    assert [r.extensions["timeout"]["read"] for _, r in collector.posts] == [4.0, 3.0, 1.0]
    (record,) = [r for r in caplog.records if r.name.startswith(("trunkline", "httpx"))]
    assert record.levelno == logging.WARNING
    assert (
        record.getMessage() == f"telemetry: 1 spans dropped: the collector at {SHOWN} answered 503 3 times within 4 s"
    )
    assert "s3cret" not in caplog.text and "pa55word" not in caplog.text and "t0ken" not in caplog.text


def test_a_retry_after_past_the_timeout_drops_the_batch_at_once():
    collector = Collector(status(429, **{"retry-after": "60"}), status(200))
    assert collector.exporter(timeout_s=4).export(SPANS) is SpanExportResult.FAILURE
    assert len(collector.posts) == 1 and collector.waits == []


def test_a_batch_is_sent_at_most_six_times():
    collector = Collector(status(502))
    assert collector.exporter(timeout_s=3600).export(SPANS) is SpanExportResult.FAILURE
    assert len(collector.posts) == MAX_SENDS == 6
    assert collector.waits == [1.0, 2.0, 4.0, 8.0, 16.0]


@pytest.mark.parametrize("code", [400, 401, 403, 404, 413, 500])
def test_a_failure_that_sending_again_cannot_mend_drops_the_batch_at_once(code: int, caplog: pytest.LogCaptureFixture):
    collector = Collector(status(code), status(200))
    with caplog.at_level(logging.WARNING, "trunkline.telemetry"):
        assert collector.exporter().export(SPANS) is SpanExportResult.FAILURE
    assert len(collector.posts) == 1
    assert caplog.messages == [f"telemetry: 1 spans dropped: the collector at {SHOWN} answered {code}"]


def test_shutdown_ends_a_wait_for_a_retry():
    collector = Collector(status(503), status(200))
    exporter = collector.exporter(timeout_s=30)
    exporter.wait = lambda seconds: True  # shut down while waiting
    assert exporter.export(SPANS) is SpanExportResult.FAILURE
    assert len(collector.posts) == 1
    exporter.shutdown()
    assert exporter.export(SPANS) is SpanExportResult.FAILURE and len(collector.posts) == 1


def test_compression_comes_from_the_config_or_the_otel_variables(monkeypatch: pytest.MonkeyPatch):
    for name in (
        "OTEL_EXPORTER_OTLP_COMPRESSION",
        "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
        "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION",
    ):
        monkeypatch.delenv(name, raising=False)
    assert otlp_compression(TelemetryConfig(), "traces") == "none"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    assert otlp_compression(TelemetryConfig(), "traces") == otlp_compression(TelemetryConfig(), "metrics") == "gzip"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "none")
    assert otlp_compression(TelemetryConfig(), "traces") == "none"
    assert otlp_compression(TelemetryConfig(), "metrics") == "gzip"
    assert otlp_compression(TelemetryConfig(otlp_compression="gzip"), "traces") == "gzip"
    exporter = _span_exporter(TelemetryConfig(otlp_endpoint="http://127.0.0.1:9", otlp_compression="gzip"))
    assert exporter.gzip and exporter.http.headers["content-encoding"] == "gzip"
    exporter.shutdown()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "brotli")
    with pytest.raises(ConfigError, match="compression 'brotli' is not supported; use gzip or none"):
        otlp_compression(TelemetryConfig(), "traces")


def test_an_unreadable_certificate_is_a_config_error(monkeypatch: pytest.MonkeyPatch, tmp_path):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(tmp_path / "missing-ca.pem"))
    with pytest.raises(ConfigError, match="cannot load the certificate"):
        _span_exporter(TelemetryConfig(otlp_endpoint="https://127.0.0.1:9"))
