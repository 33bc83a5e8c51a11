"""The Prometheus scrape endpoint (`metrics.listen`, off by default).

The supervisor sees every request begin and end, and every bus event, so it keeps
the counts: requests by provider, model and outcome, errors by class, retries,
tokens, cost, latency and time to the first event, and, read at scrape time,
requests in flight, worker restarts and what the replay rings hold. `metrics_http`
serves them from threads of its own; prometheus_client's metrics take their own locks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..protocol.messages import BusEvent, ErrorEvent, Finish

if TYPE_CHECKING:
    from .daemon import Daemon
    from .requests import RequestState

#: Seconds: from a millisecond local answer to a long generation.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class _Live(Collector):
    """Values read from the daemon at scrape time."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    def collect(self) -> Iterator[Any]:
        daemon = self.daemon
        in_flight = GaugeMetricFamily("trunkline_requests_in_flight", "Requests submitted and not yet ended",
                                      labels=["provider"])
        counts: dict[str, int] = {}
        for state in list(daemon.requests.active.values()):
            counts[state.provider] = counts.get(state.provider, 0) + 1
        for provider in daemon.slots:
            in_flight.add_metric([provider], counts.get(provider, 0))
        yield in_flight
        restarts = GaugeMetricFamily("trunkline_worker_restarts", "Restarts of each provider's worker",
                                     labels=["provider"])
        up = GaugeMetricFamily("trunkline_worker_up", "1 when the provider's worker is running", labels=["provider"])
        for name, slot in list(daemon.slots.items()):
            restarts.add_metric([name], slot.restarts)
            up.add_metric([name], 1 if slot.state == "running" else 0)
        yield restarts
        yield up
        table = daemon.requests
        yield GaugeMetricFamily("trunkline_replay_requests", "Requests whose events are kept for replay",
                                value=len(table.active) + len(table.ended))
        yield GaugeMetricFamily("trunkline_replay_ended_bytes", "Bytes the replay rings of ended requests hold",
                                value=table.ended_bytes)


class DaemonMetrics:
    def __init__(self, daemon: Daemon) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ["provider", "model"]
        self.requests = Counter("trunkline_requests", "Requests ended, by outcome (a finish reason, or error)",
                                [*labels, "outcome"], registry=self.registry)
        self.errors = Counter("trunkline_errors", "Requests ended with an error, by class",
                              [*labels, "error_class"], registry=self.registry)
        self.retries = Counter("trunkline_retries", "Attempts retried", ["provider"], registry=self.registry)
        self.tokens = Counter("trunkline_tokens", "Tokens, by kind (input, output, cache_read, reasoning)",
                              [*labels, "kind"], registry=self.registry)
        self.cost = Counter("trunkline_cost_usd", "Cost in USD of the requests that ended", labels,
                            registry=self.registry)
        self.latency = Histogram("trunkline_request_duration_seconds", "From submit to the terminal event",
                                 labels, buckets=LATENCY_BUCKETS, registry=self.registry)
        self.ttft = Histogram("trunkline_time_to_first_event_seconds", "Streams: from submit to the first event",
                              labels, buckets=LATENCY_BUCKETS, registry=self.registry)
        self.registry.register(_Live(daemon))

    def first_event(self, state: RequestState, seconds: float) -> None:
        self.ttft.labels(state.provider, state.model).observe(seconds)

    def ended(self, state: RequestState, terminal: Any, seconds: float) -> None:
        provider, model = state.provider, state.model
        self.latency.labels(provider, model).observe(seconds)
        if type(terminal) is Finish:
            response = terminal.response
            self.requests.labels(provider, model, response.finish_reason.reason).inc()
        elif type(terminal) is ErrorEvent:
            self.requests.labels(provider, model, "error").inc()
            self.errors.labels(provider, model, terminal.error.error_class).inc()
            response = terminal.partial
        else:
            self.requests.labels(provider, model, "ended").inc()
            return
        if response is None:
            return
        usage = response.usage
        for kind, value in (("input", usage.input_tokens), ("output", usage.output_tokens),
                            ("cache_read", usage.cache_read_tokens), ("reasoning", usage.reasoning_tokens)):
            if value:
                self.tokens.labels(provider, model, kind).inc(value)
        if response.cost_usd:
            self.cost.labels(provider, model).inc(response.cost_usd)

    def bus(self, event: BusEvent) -> None:
        if event.name == "llm.retrying" and event.provider:
            self.retries.labels(event.provider).inc()
