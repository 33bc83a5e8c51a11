"""The GenAI client histograms, kept by the supervisor and exported by the OTLP exporter.

The SDK's MeterProvider spends about 20 µs in each `record` (attribute cleaning,
hashing, a Measurement, exemplar checks), four records per request: more than the
whole span. Our histograms are three fixed instruments with a handful of
attribute sets, so they are kept here as plain bucket counts (a bisect and a few
additions per value, on the supervisor's one thread) and turned into the SDK's
metric data model once per export interval, which the official OTLP exporter
sends. Temporality is cumulative, as the SDK's default is.
"""

from __future__ import annotations

import logging
import threading
import time
from bisect import bisect_left
from typing import Any

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricsData,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

log = logging.getLogger("trunkline.telemetry")


class _Series:
    __slots__ = ("attributes", "buckets", "count", "sum", "min", "max")

    def __init__(self, attributes: dict[str, Any], size: int) -> None:
        self.attributes = attributes
        self.buckets = [0] * size
        self.count = 0
        self.sum = 0.0
        self.min = float("inf")
        self.max = float("-inf")


class GenAIHistogram:
    """One histogram instrument: a series per distinct set of attributes."""

    def __init__(self, name: str, unit: str, description: str, bounds: list[float]) -> None:
        self.name, self.unit, self.description = name, unit, description
        self.bounds = bounds
        self.series: dict[tuple[Any, ...], _Series] = {}
        self.lock = threading.Lock()  # the exporter's thread reads what the supervisor's writes

    def record(self, value: float, attributes: dict[str, Any]) -> None:
        key = tuple(attributes.items())
        with self.lock:
            series = self.series.get(key)
            if series is None:
                series = self.series[key] = _Series(dict(attributes), len(self.bounds) + 1)
            series.buckets[bisect_left(self.bounds, value)] += 1  # a bucket holds values <= its bound
            series.count += 1
            series.sum += value
            if value < series.min:
                series.min = value
            if value > series.max:
                series.max = value

    def metric(self, start_ns: int, now_ns: int) -> Metric | None:
        with self.lock:
            points = [HistogramDataPoint(attributes=s.attributes, start_time_unix_nano=start_ns, time_unix_nano=now_ns,
                                         count=s.count, sum=s.sum, bucket_counts=list(s.buckets),
                                         explicit_bounds=self.bounds, min=s.min, max=s.max)
                      for s in self.series.values()]
        if not points:
            return None
        return Metric(name=self.name, description=self.description, unit=self.unit,
                      data=Histogram(data_points=points, aggregation_temporality=AggregationTemporality.CUMULATIVE))


class MetricsExport:
    """Sends the instruments every `interval_s` from its own thread, and once more at shutdown."""

    def __init__(self, instruments: list[GenAIHistogram], exporter: MetricExporter, resource: Resource,
                 scope: InstrumentationScope, interval_s: float) -> None:
        self.instruments = instruments
        self.exporter = exporter
        self.resource = resource
        self.scope = scope
        self.interval_s = interval_s
        self.start_ns = time.time_ns()
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def data(self) -> MetricsData | None:
        now = time.time_ns()
        metrics = [m for m in (i.metric(self.start_ns, now) for i in self.instruments) if m is not None]
        if not metrics:
            return None
        return MetricsData(resource_metrics=[ResourceMetrics(
            resource=self.resource, schema_url="",
            scope_metrics=[ScopeMetrics(scope=self.scope, metrics=metrics, schema_url="")])])

    def export_now(self) -> None:
        data = self.data()
        if data is None:
            return
        try:
            self.exporter.export(data)
        except Exception as exc:  # noqa: BLE001 - a collector's failure never reaches a request
            log.warning("telemetry: metrics export failed: %s", exc)

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="trunkline-otel-metrics", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.wait(self.interval_s):
            self.export_now()

    def shutdown(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join()
        self.export_now()
        self.exporter.shutdown()
