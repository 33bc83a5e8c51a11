"""The GenAI client histograms, kept by the supervisor and exported by the OTLP exporter.

The SDK's MeterProvider spends about 20 µs in each `record` (attribute cleaning,
hashing, a Measurement, exemplar checks), four records per request and one per
chunk of a stream: more than the whole span. Our histograms are four fixed
instruments with a handful of attribute sets, so they are kept here as plain
bucket counts (a bisect and a few additions per value, on the supervisor's one
thread) and turned into the SDK's metric data model once per export interval,
which the official OTLP exporter sends. Temporality is cumulative, as the SDK's
default is.
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


class Counts:
    """Values in buckets (a bucket holds those <= its bound, the last one the rest),
    with their count, sum, min and max."""

    __slots__ = ("buckets", "count", "max", "min", "sum")

    def __init__(self, size: int) -> None:
        self.buckets = [0] * size
        self.count = 0
        self.sum = 0.0
        self.min = float("inf")
        self.max = float("-inf")

    def add(self, value: float, bounds: list[float]) -> None:
        self.buckets[bisect_left(bounds, value)] += 1
        self.count += 1
        self.sum += value
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value

    def merge(self, other: Counts) -> None:
        for i, n in enumerate(other.buckets):
            self.buckets[i] += n
        self.count += other.count
        self.sum += other.sum
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)


class GenAIHistogram:
    """One histogram instrument: a series of counts per distinct set of attributes."""

    def __init__(self, name: str, unit: str, description: str, bounds: list[float]) -> None:
        self.name, self.unit, self.description = name, unit, description
        self.bounds = bounds
        self.series: dict[tuple[Any, ...], tuple[dict[str, Any], Counts]] = {}
        self.lock = threading.Lock()  # the exporter's thread reads what the supervisor's writes

    def _series(self, attributes: dict[str, Any]) -> Counts:
        key = tuple(attributes.items())
        found = self.series.get(key)
        if found is None:
            found = self.series[key] = (dict(attributes), Counts(len(self.bounds) + 1))
        return found[1]

    def record(self, value: float, attributes: dict[str, Any]) -> None:
        with self.lock:
            self._series(attributes).add(value, self.bounds)

    def merge(self, counts: Counts, attributes: dict[str, Any]) -> None:
        """Values counted apart (a stream's chunks, while its attributes were not all known)."""
        with self.lock:
            self._series(attributes).merge(counts)

    def metric(self, start_ns: int, now_ns: int) -> Metric | None:
        with self.lock:
            points = [
                HistogramDataPoint(
                    attributes=attrs,
                    start_time_unix_nano=start_ns,
                    time_unix_nano=now_ns,
                    count=c.count,
                    sum=c.sum,
                    bucket_counts=list(c.buckets),
                    explicit_bounds=self.bounds,
                    min=c.min,
                    max=c.max,
                )
                for attrs, c in self.series.values()
            ]
        if not points:
            return None
        return Metric(
            name=self.name,
            description=self.description,
            unit=self.unit,
            data=Histogram(data_points=points, aggregation_temporality=AggregationTemporality.CUMULATIVE),
        )


class MetricsExport:
    """Sends the instruments every `interval_s` from its own thread, and once more at shutdown."""

    def __init__(
        self,
        instruments: list[GenAIHistogram],
        exporter: MetricExporter,
        resource: Resource,
        scope: InstrumentationScope,
        interval_s: float,
    ) -> None:
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
        return MetricsData(
            resource_metrics=[
                ResourceMetrics(
                    resource=self.resource,
                    schema_url=self.resource.schema_url,
                    scope_metrics=[
                        ScopeMetrics(scope=self.scope, metrics=metrics, schema_url=self.scope.schema_url or "")
                    ],
                )
            ]
        )

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
