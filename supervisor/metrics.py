"""The Prometheus metrics (`metrics.listen`, off by default).

The supervisor sees every request begin and end, and every bus event, so it keeps
the counts: requests by provider, model and outcome, errors by class, refused
submits, retries and rate-limit waits, tokens, cost, latency and time to the first
event, and, read at scrape time, requests in flight, each worker's state and
restarts, and what the replay rings hold. `metrics_http` serves them from threads
of its own; prometheus_client's metrics take their own locks.

Every label value comes from the daemon, never from a client: a `model` label is
a catalog id (the shipped catalog or the config's `models:`), any other name is
`other`, so no client can make new series by naming models.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Protocol, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..protocol.messages import RETRYABLE, AnyEvent, BusEvent, ErrorEvent, ErrorInfo, Finish, Response
from .admission.keyring import Keyring
from .requests import OTHER_MODEL, RequestTable
from .slot import State

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from .requests import RequestState

#: Seconds: from a millisecond local answer to a long generation.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
WORKER_STATES: tuple[State, ...] = get_args(State)


def model_label(state: RequestState) -> str:
    """The request's catalog id, or `other` for a name the catalog does not list (a
    pass-through name is whatever the client wrote)."""
    resolved = state.resolved
    return state.model if resolved is not None and resolved.in_catalog else OTHER_MODEL


class Worker(Protocol):
    """What the metrics read of a provider's worker slot."""

    @property
    def state(self) -> State: ...

    @property
    def restarts(self) -> int: ...


class _Live(Collector):
    """Values read at scrape time (on the scrape's thread: each read is one lookup)."""

    def __init__(self, requests: RequestTable, workers: Mapping[str, Worker]) -> None:
        self.requests = requests
        self.workers = workers

    def collect(self) -> Iterator[Metric]:
        table = self.requests
        in_flight = GaugeMetricFamily(
            "trunkline_requests_in_flight", "Requests submitted and not yet ended", labels=["provider"]
        )
        slots = list(self.workers.items())
        for provider, _ in slots:
            in_flight.add_metric([provider], table.count_of(provider))
        yield in_flight
        states = GaugeMetricFamily(
            "trunkline_worker_state",
            "1 for the state each provider's worker is in "
            "(starting, running, restarting, unavailable, not_configured, stopped)",
            labels=["provider", "state"],
        )
        up = GaugeMetricFamily(
            "trunkline_worker_up", "1 when the configured provider's worker is running", labels=["provider"]
        )
        restarts = CounterMetricFamily(
            "trunkline_worker_restarts", "Restarts of each configured provider's worker", labels=["provider"]
        )
        for name, slot in slots:
            current = slot.state
            for each in WORKER_STATES:
                states.add_metric([name, each], 1 if each == current else 0)
            if current != "not_configured":  # no worker to be up: not an outage to alert on
                up.add_metric([name], 1 if current == "running" else 0)
                restarts.add_metric([name], slot.restarts)
        yield states
        yield up
        yield restarts
        yield from _key_use(slots)
        yield GaugeMetricFamily(
            "trunkline_replay_requests",
            "Requests whose events are kept for replay",
            value=len(table.active) + len(table.ended),
        )
        yield GaugeMetricFamily(
            "trunkline_replay_ended_bytes", "Bytes the replay rings of ended requests hold", value=table.ended_bytes
        )


def _key_use(slots: list[tuple[str, Worker]]) -> Iterator[Metric]:
    """Each key of the providers that have several (`keys_env`), by its variable."""
    given = CounterMetricFamily(
        "trunkline_provider_key_requests", "Requests given each key of a provider", labels=["provider", "key"]
    )
    resting = GaugeMetricFamily(
        "trunkline_provider_key_resting",
        "1 while a provider's key rests after a 429, 401 or 403 (no request is given it)",
        labels=["provider", "key"],
    )
    for name, slot in slots:
        keyring: Keyring | None = getattr(slot, "keyring", None)  # the front door's processes have none
        for key in keyring.use() if keyring is not None else []:
            given.add_metric([name, key.variable], key.requests)
            resting.add_metric([name, key.variable], 1 if key.cooling_s is not None else 0)
    yield given
    yield resting


class DaemonMetrics:
    """The counters and histograms the daemon's hooks feed, and the values read at
    scrape time from the request table and the workers (`workers` may be filled after
    this is made: it is read at each scrape)."""

    def __init__(self, requests: RequestTable, workers: Mapping[str, Worker]) -> None:
        # `_created` samples would double the series for little use (Prometheus' own
        # created-timestamp handling does not need them in the text format).
        disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client leaves it unannotated
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ["provider", "model"]
        self.requests = Counter(
            "trunkline_requests",
            "Requests ended, by outcome (a finish reason, or error)",
            [*labels, "outcome"],
            registry=self.registry,
        )
        self.errors = Counter(
            "trunkline_errors",
            "Requests ended with an error, by class",
            [*labels, "error_class"],
            registry=self.registry,
        )
        self.refused = Counter(
            "trunkline_requests_refused",
            "Submits refused before any provider call, by class",
            ["error_class"],
            registry=self.registry,
        )
        self.retries = Counter(
            "trunkline_retries",
            "Attempts retried, by the failed attempt's error class",
            ["provider", "error_class"],
            registry=self.registry,
        )
        self.rate_limit_waits = Counter(
            "trunkline_rate_limit_waits",
            "Waits before a retry because the provider rate-limited the attempt "
            "or said when to come back (Retry-After)",
            ["provider"],
            registry=self.registry,
        )
        self.rate_limit_seconds = Counter(
            "trunkline_rate_limit_wait_seconds", "Seconds of those waits", ["provider"], registry=self.registry
        )
        self.tokens = Counter(
            "trunkline_tokens",
            "Tokens, by kind (input, output, cache_read, cache_write, "
            "reasoning; cache_* are part of input, reasoning part of output)",
            [*labels, "kind"],
            registry=self.registry,
        )
        self.cost = Counter(
            "trunkline_cost_usd", "Cost in USD of the requests that ended", labels, registry=self.registry
        )
        self.latency = Histogram(
            "trunkline_request_duration_seconds",
            "From submit to the terminal event",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.ttft = Histogram(
            "trunkline_time_to_first_event_seconds",
            "Streams: from submit to the first event",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        # -- routes (issue 31) --
        self.route_requests = Counter(
            "trunkline_route_requests",
            "Requests of a route ended, by the deployment that served (or failed last) and outcome",
            ["route", "deployment", "outcome"],
            registry=self.registry,
        )
        self.route_fallbacks = Counter(
            "trunkline_route_fallbacks",
            "Requests handed from a route's deployment to the next, by the failed one's error class",
            ["route", "from_deployment", "to_deployment", "error_class"],
            registry=self.registry,
        )
        self.route_cooldowns = Counter(
            "trunkline_route_cooldowns",
            "Times a deployment was cooled down (circuit breaker, or a rate limit's Retry-After)",
            ["route", "deployment"],
            registry=self.registry,
        )
        self.registry.register(_Live(requests, workers))
        # Client keys (`clients:`), labelled by the key's configured name, never the key.
        self.key_requests = Counter(
            "trunkline_key_requests",
            "Submits of each named client key, by outcome (admitted, or the refusal's class)",
            ["key", "outcome"],
            registry=self.registry,
        )
        self.key_tokens = Counter(
            "trunkline_key_tokens",
            "Input and output tokens of each named client key's ended requests",
            ["key"],
            registry=self.registry,
        )
        self.key_cost = Counter(
            "trunkline_key_cost_usd",
            "Cost in USD of each named client key's ended requests",
            ["key"],
            registry=self.registry,
        )
        self.key_in_flight = Gauge(
            "trunkline_key_requests_in_flight",
            "Requests of each named client key admitted and not yet ended",
            ["key"],
            registry=self.registry,
        )

    def key_admitted(self, key: str) -> None:
        self.key_requests.labels(key, "admitted").inc()
        self.key_in_flight.labels(key).inc()

    def key_refused(self, key: str, error_class: str) -> None:
        self.key_requests.labels(key, error_class).inc()

    def key_ended(self, key: str, tokens: int, cost_usd: float | None) -> None:
        self.key_in_flight.labels(key).dec()
        if tokens:
            self.key_tokens.labels(key).inc(tokens)
        if cost_usd:
            self.key_cost.labels(key).inc(cost_usd)

    def first_event(self, state: RequestState, seconds: float) -> None:
        self.ttft.labels(state.provider, model_label(state)).observe(seconds)

    def refused_submit(self, error: ErrorInfo) -> None:
        self.refused.labels(error.error_class).inc()

    def ended(self, state: RequestState, terminal: AnyEvent | None, seconds: float) -> None:
        provider, model = state.provider, model_label(state)
        self.latency.labels(provider, model).observe(seconds)
        response: Response | None
        match terminal:
            case Finish():
                response = terminal.response
                self.requests.labels(provider, model, response.finish_reason.reason).inc()
            case ErrorEvent():
                self.requests.labels(provider, model, "error").inc()
                self.errors.labels(provider, model, terminal.error.error_class).inc()
                response = terminal.partial
            case _:
                self.requests.labels(provider, model, "ended").inc()
                return
        if response is None:
            return
        usage = response.usage
        for kind, value in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cache_read", usage.cache_read_tokens),
            ("cache_write", usage.cache_write_tokens),
            ("reasoning", usage.reasoning_tokens),
        ):
            if value:
                self.tokens.labels(provider, model, kind).inc(value)
        if response.cost_usd:
            self.cost.labels(provider, model).inc(response.cost_usd)

    def route_ended(self, route: str, deployment: str, outcome: str) -> None:
        self.route_requests.labels(route, deployment, outcome).inc()

    def route_fallback(self, route: str, failed: str, after: str, error_class: str) -> None:
        self.route_fallbacks.labels(route, failed, after, error_class).inc()

    def route_cooldown(self, route: str, deployment: str) -> None:
        self.route_cooldowns.labels(route, deployment).inc()

    def bus(self, event: BusEvent) -> None:
        name, provider = event.name, event.provider
        if not provider or name not in ("llm.retrying", "llm.rate_limited"):
            return
        error_class = event.error_class if event.error_class in RETRYABLE else "other"
        if name == "llm.retrying":
            self.retries.labels(provider, error_class).inc()
        # A worker publishes `llm.rate_limited` (a Retry-After it will wait) just before
        # the `llm.retrying` of the same wait: a rate_limit class's wait is counted at
        # the latter, another class's Retry-After at the former, so each wait once.
        rate_limited = error_class == "rate_limit"
        if (name == "llm.retrying" and rate_limited) or (name == "llm.rate_limited" and not rate_limited):
            self.rate_limit_waits.labels(provider).inc()
            self.rate_limit_seconds.labels(provider).inc(max(event.wait_s or 0.0, 0.0))
