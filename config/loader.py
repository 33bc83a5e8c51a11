"""Load the configuration: the shipped defaults, a user file merged over them.

Every error names the file, the key path and what was expected; the daemon
refuses to start on any of them. Unknown keys are errors here (unlike on the
wire), because a misspelt key in a config file is a silent bug otherwise.
"""

from __future__ import annotations

import math
import os
import re
import types
import typing
import urllib.parse
from pathlib import Path
from typing import Any, Literal

import msgspec

from ..protocol.messages import ModelInfo
from .base_urls import ollama_host_url
from .hosts import is_loopback, is_this_machine
from .model_entries import SET_BY_THE_CATALOG, model_entry
from .names import did_you_mean
from .redis_url import BadRedisUrl, parse_url

DEFAULTS_PATH = Path(__file__).resolve().with_name("defaults.yaml")
USER_CONFIG_PATH = Path("~/.config/trunkline/config.yaml")
#: The config file `serve` and autostarting clients read (default: `USER_CONFIG_PATH`).
CONFIG_ENV = "TRUNKLINE_CONFIG"

#: `anthropic-version` values an Anthropic provider may speak (`options.anthropic_version`).
ANTHROPIC_VERSIONS = ("2023-06-01", "2026-10-21")

#: Provider implementations this version ships (one worker package each).
ProviderType = Literal["mock", "anthropic", "openai", "openai_compat", "ollama", "gemini"]


class ConfigError(Exception):
    """A configuration file that cannot be used, with the file and key path."""


class _Section(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    pass


class Endpoints(_Section):
    control: str = "control.ipc"
    events: str = "events.ipc"
    #: PEM certificate chain and private key for `tls+tcp://` endpoints.
    tls_cert_file: str | None = None
    tls_key_file: str | None = None


def max_event_bytes(max_response_bytes: int) -> int:
    """The largest event the daemon sends: a finish carries the whole response (its
    text up to `max_response_bytes`) and, on request, the raw body as well; 1 MiB
    for the rest (usage, ids, warnings)."""
    return 2 * max_response_bytes + (1 << 20)


class LimitsConfig(_Section):
    max_message_bytes: int = 16 * 1024 * 1024
    #: Connections each endpoint accepts; one more is closed as soon as it is made.
    max_connections: int = 1024
    #: Events queued per subscriber connection before its oldest are dropped (nng's
    #: Pub0 send buffer; at most 8192).
    subscriber_queue: int = 1024
    #: File descriptors kept free for the daemon itself (worker restarts): connections
    #: that would eat into them are refused.
    fd_reserve: int = 64
    #: Largest provider response body a worker reads, counted decompressed.
    max_response_bytes: int = 32 * 1024 * 1024
    #: Requests one control connection may have running at once (one more is refused).
    max_requests_per_client: int = 1024
    #: Bytes of submits one control connection may have running at once: what the
    #: daemon and the worker hold for them is a multiple of this.
    max_bytes_per_client: int = 64 * 1024 * 1024

    @property
    def max_event_bytes(self) -> int:
        return max_event_bytes(self.max_response_bytes)


class Supervision(_Section):
    max_restarts: int = 5
    restart_window_s: float = 30.0
    unavailable_retry_s: float = 30.0
    restart_backoff_s: float = 0.05
    heartbeat_interval_s: float = 1.0
    heartbeat_timeout_s: float = 10.0
    shutdown_grace_s: float = 10.0
    cancel_grace_s: float = 5.0
    #: How a worker process starts: forked by the fork server (imported once, shared
    #: pages), or spawned as a new interpreter.
    worker_start: Literal["forkserver", "spawn"] = "forkserver"


#: In the runtime directory: the lock a client holds while it probes for the daemon,
#: starts one and connects (so two clients start one daemon), and a daemon exiting
#: when idle holds to its end (so no client connects to a daemon on its way out).
AUTOSTART_LOCK = "autostart.lock"
#: In the runtime directory: the output of a daemon a client started.
AUTOSTART_LOG = "daemon.log"


class Autostart(_Section):
    """A daemon a client started itself (`autostart`): it exits once no client has been
    connected and no request has run for this long, as build daemons do."""

    idle_exit_s: float = 600.0
    #: How long a client waits for the daemon it started to answer.
    start_timeout_s: float = 30.0


class RetryPolicy(_Section):
    max_retries: int = 2
    base_delay_s: float = 1.0
    multiplier: float = 2.0
    max_delay_s: float = 60.0
    jitter: float = 0.5
    retry_after_cap_s: float = 60.0
    #: A timed-out attempt is sent again only when this is on: a timeout usually means a
    #: slow generation, which a second attempt repeats (and the provider may bill both).
    retry_timeouts: bool = False


class TimeoutPolicy(_Section):
    connect_s: float = 10.0
    request_s: float = 600.0
    stream_idle_s: float = 60.0


class ReplayConfig(_Section):
    ring_events: int = 20000
    #: Bytes of events one request keeps for replay (its newest; always its last event).
    max_request_bytes: int = 16 * 1024 * 1024
    keep_s: float = 300.0
    max_requests: int = 10000
    max_bytes: int = 64 * 1024 * 1024


#: The longest a key rests on a Retry-After (a daily quota's says when the day ends).
KEY_COOLDOWN_CAP_S = 86400.0
#: Error classes that say something about the key a request used (429, 401, 403): with
#: several keys (`keys_env`), that key rests and the request moves to another.
KEY_FAILURES = frozenset({"rate_limit", "authentication", "access_denied"})


class RateLimitsConfig(_Section):
    """The rate limits of a client key or of a provider used as a deployment; an
    unset one is no limit. `rpm` and `tpm` count the last 60 seconds (tokens estimated
    at admission, corrected by the usage the provider reports); `parallel` counts
    requests running."""

    rpm: int | None = None
    tpm: int | None = None
    parallel: int | None = None


class ProviderConfig(_Section):
    """One provider instance; several instances may share a `type`."""

    type: ProviderType
    enabled: bool = True
    #: The environment variable holding the API key, or several names: the first one set wins.
    api_key_env: str | list[str] | None = None
    #: Several variables, each holding a key of its own, all used in turn (the supervisor
    #: picks one per request and leaves a key alone while it cools down after a 429 or a
    #: 401/403). Replaces `api_key_env` (a file may give one or the other).
    keys_env: list[str] = msgspec.field(default_factory=list)
    #: How long a key of `keys_env` is left alone after a 429 that gives no Retry-After,
    #: or after a 401/403.
    key_cooldown_s: float = 60.0
    base_url: str | None = None
    #: An environment variable that, when set, replaces `base_url`. The shipped providers
    #: name the one their official SDK reads (ANTHROPIC_BASE_URL, OPENAI_BASE_URL,
    #: GEMINI_BASE_URL, OLLAMA_HOST); `""` reads none.
    base_url_env: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    max_connections: int = 100
    retry: RetryPolicy | None = None
    timeouts: TimeoutPolicy | None = None
    options: dict[str, Any] = msgspec.field(default_factory=dict)
    #: Limits of this instance as a deployment (requests naming it directly count too).
    limits: RateLimitsConfig | None = None

    def key_env_names(self) -> list[str]:
        """Every variable that may hold one of this provider's keys (its worker inherits them)."""
        if self.keys_env:
            return list(self.keys_env)
        if self.api_key_env is None:
            return []
        return [self.api_key_env] if isinstance(self.api_key_env, str) else list(self.api_key_env)

    def key_names(self) -> list[str]:
        """The provider's keys by index (`Job.key_index`), each named by its variable:
        every one of `keys_env`, or the one key of `api_key_env` (the first variable set,
        else the first named)."""
        if self.keys_env:
            return list(self.keys_env)
        names = self.key_env_names()
        return [next((n for n in names if os.environ.get(n)), names[0])] if names else []

    def api_keys(self) -> list[str | None]:
        """The keys' values by index, None for a variable that is not set (or empty)."""
        return [os.environ.get(name) or None for name in self.key_names()]

    def api_key(self) -> str | None:
        """The first key that is set: `api_key_env`'s (the first variable set wins), or the
        first of `keys_env` that is set."""
        return next((key for key in self.api_keys() if key), None)

    def key_cooldown(self, error_class: str, retry_after_s: float | None) -> float:
        """How long one of its keys rests after answering `error_class`: what a 429's
        Retry-After asks (a day at most), else `key_cooldown_s`."""
        if error_class == "rate_limit" and retry_after_s is not None and retry_after_s > 0:
            return min(retry_after_s, KEY_COOLDOWN_CAP_S)
        return self.key_cooldown_s

    def needs_key(self) -> bool:
        return bool(self.key_env_names())

    def base_url_variable(self) -> str | None:
        """The variable that replaces `base_url` when set: `base_url_env`, or its older
        spelling `options.base_url_env` (which, only ever set by a user, wins)."""
        old = self.options.get("base_url_env")
        return (old if isinstance(old, str) else None) or self.base_url_env or None

    def env_base_url(self) -> str | None:
        """The base URL the environment gives, as a URL (OLLAMA_HOST may be a bare host:port)."""
        name = self.base_url_variable()
        value = os.environ.get(name, "").strip() if name else ""
        if not value:
            return None
        return ollama_host_url(value) if self.type == "ollama" else value

    def resolved_base_url(self) -> str | None:
        return self.env_base_url() or self.base_url

    def key_hint(self) -> str:
        """The variable names, for messages: `A` or `A or B`."""
        return " or ".join(self.key_env_names())


class _Listening(_Section):
    """A section that serves HTTP on `listen` (`HOST:PORT`; without a host, 127.0.0.1)."""

    listen: str | None = None

    def address(self) -> tuple[str, int]:
        """Host and port to listen on (a missing host is the loopback address)."""
        assert self.listen is not None
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]") or "127.0.0.1", int(port)

    @property
    def on_loopback(self) -> bool:
        """Whether only this machine can reach the endpoint (a loopback address, or
        localhost; a host name that is not localhost may resolve to anything)."""
        return is_loopback(self.address()[0])


class MetricsConfig(_Listening):
    #: `listen`: `HOST:PORT` of a Prometheus scrape endpoint (`GET /metrics`); off when
    #: unset. Without a host (`:9464`) it listens on 127.0.0.1; every interface needs
    #: `0.0.0.0:9464` or `[::]:9464`, and a bearer token.
    #: A file holding the token a scrape must send as `Authorization: Bearer <token>` (the
    #: file Prometheus' `authorization.credentials_file` can read too); read at start.
    bearer_token_file: str | None = None
    #: Or the name of an environment variable holding that token.
    bearer_token_env: str | None = None

    def bearer_token(self) -> str | None:
        """The token scrapes must send, or None when none is configured. Raises
        ConfigError when the configured file or variable holds no usable token."""
        if self.bearer_token_file is not None:
            where = f"`metrics.bearer_token_file` ({self.bearer_token_file})"
            try:
                token = Path(self.bearer_token_file).expanduser().read_text().strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(
                    f"config error at {where}: cannot read it: {getattr(exc, 'strerror', None) or type(exc).__name__}"
                ) from None
        elif self.bearer_token_env is not None:
            where = f"`metrics.bearer_token_env` ({self.bearer_token_env})"
            token = os.environ.get(self.bearer_token_env, "").strip()
        else:
            return None
        if not token:
            raise ConfigError(f"config error at {where}: it holds no token")
        if not all("!" <= c <= "~" for c in token):
            # Said without the token itself: it must never reach a log.
            raise ConfigError(f"config error at {where}: a token is one word of printable ASCII characters")
        return token


class HttpConfig(_Listening):
    """The HTTP front door: OpenAI's and Anthropic's wire APIs in front of the daemon.
    `listen` (`HOST:PORT`; `:8300` is 127.0.0.1:8300; port 0: one the system picks,
    which the daemon logs) turns it on; every interface needs keys."""

    #: Processes serving the one listening socket (the kernel spreads connections).
    processes: int = 1
    #: A file of the keys clients may send (one per line; `#` starts a comment), as
    #: `Authorization: Bearer <key>` or `x-api-key: <key>`; read at start.
    keys_file: str | None = None
    #: Or environment variables, each holding one such key.
    keys_env: list[str] = msgspec.field(default_factory=list)
    #: Largest request body (JSON, images inlined as base64 included).
    max_body_bytes: int = 16 * 1024 * 1024
    #: Largest request head (the request line and headers).
    max_header_bytes: int = 16 * 1024
    #: A connection may wait this long for its next request, and a request's body may
    #: pause this long between its reads (a slow client is let go).
    idle_timeout_s: float = 60.0
    read_timeout_s: float = 30.0

    def keys(self) -> list[str]:
        """The keys clients may send (empty: none are asked for). Raises ConfigError when
        a configured file or variable holds no usable key; never says a key itself."""
        found: list[str] = []
        if self.keys_file is not None:
            where = f"`http.keys_file` ({self.keys_file})"
            try:
                text = Path(self.keys_file).expanduser().read_text()
            except (OSError, UnicodeDecodeError) as exc:
                reason = getattr(exc, "strerror", None) or type(exc).__name__
                raise ConfigError(f"config error at {where}: cannot read it: {reason}") from None
            lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
            found += [line for line in lines if line]
            if not found:
                raise ConfigError(f"config error at {where}: it holds no key")
        for name in self.keys_env:
            key = os.environ.get(name, "").strip()
            if not key:
                raise ConfigError(f"config error at `http.keys_env`: {name} is not set (or empty)")
            found.append(key)
        for key in found:
            if not all("!" <= c <= "~" for c in key):
                raise ConfigError("config error at `http.keys_file`/`keys_env`: a key is one word of printable ASCII")
        return found


# -- clients: named client keys, their limits and budgets (issue 31) -------------------


class BudgetConfig(_Section):
    """USD a client key may spend per UTC day and per UTC month (the daemon's computed
    cost); unset: no budget. A request is admitted while the spend is below it."""

    usd_per_day: float | None = None
    usd_per_month: float | None = None


class ClientKeyConfig(_Section):
    """One named client key: a key for the HTTP front door (Bearer or x-api-key) and a
    token for the protocol (`hello.token`), from `key_env` or `key_file` (read at start),
    with optional limits and a budget."""

    key_env: str | None = None
    key_file: str | None = None
    limits: RateLimitsConfig = msgspec.field(default_factory=RateLimitsConfig)
    budget: BudgetConfig = msgspec.field(default_factory=BudgetConfig)

    def key(self, name: str) -> str:
        """The key itself. Raises ConfigError when its file or variable holds no usable
        key; the message never says a key."""
        if self.key_file is not None:
            where = f"`clients.{name}.key_file` ({self.key_file})"
            try:
                lines = Path(self.key_file).expanduser().read_text().splitlines()
            except (OSError, UnicodeDecodeError) as exc:
                reason = getattr(exc, "strerror", None) or type(exc).__name__
                raise ConfigError(f"config error at {where}: cannot read it: {reason}") from None
            keys = [k for k in (line.split("#", 1)[0].strip() for line in lines) if k]
            if len(keys) != 1:
                raise ConfigError(f"config error at {where}: it must hold one key, found {len(keys)}")
            key = keys[0]
        else:
            assert self.key_env is not None  # the loader checks that one of the two is set
            where = f"`clients.{name}.key_env` ({self.key_env})"
            key = os.environ.get(self.key_env, "").strip()
            if not key:
                raise ConfigError(f"config error at {where}: the variable is not set (or empty)")
        if not all("!" <= c <= "~" for c in key):
            raise ConfigError(f"config error at {where}: a key is one word of printable ASCII")
        if len(key) < 16:
            raise ConfigError(f"config error at {where}: a key needs at least 16 characters")
        return key


#: A client key's name: what logs, status and metrics labels show (never the key).
CLIENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def client_keys(config: Config) -> dict[str, str]:
    """Each named client key by its name, read from its variable or file (at start).
    Raises ConfigError for a key that cannot be used, or one given to two names (or
    also listed among `http.keys_*`): a key must say who brings it."""
    keys: dict[str, str] = {}
    owner: dict[str, str] = {}
    for name, entry in config.clients.items():
        key = entry.key(name)
        if key in owner:
            raise ConfigError(f"config error at `clients.{name}`: its key is also the key of `clients.{owner[key]}`")
        owner[key] = name
        keys[name] = key
    if keys and config.http.listen:
        unnamed = config.http.keys()
        for key in unnamed:
            if key in owner:
                raise ConfigError(
                    f"config error at `clients.{owner[key]}`: its key is also one of `http.keys_file`/`keys_env`"
                )
    return keys


def clients_problem(name: str, entry: ClientKeyConfig) -> tuple[str, str] | None:
    """The key (under `clients.<name>`) and why the entry cannot be used, or None."""
    if not CLIENT_NAME.fullmatch(name):
        return "", "client key names match [A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
    if (entry.key_env is None) == (entry.key_file is None):
        return "key_env", "give key_env (an environment variable) or key_file, one of the two"
    return limits_problem(entry.limits, "limits") or budget_problem(entry.budget)


def limits_problem(limits: RateLimitsConfig, at: str) -> tuple[str, str] | None:
    for key in ("rpm", "tpm", "parallel"):
        value = getattr(limits, key)
        if value is not None and not 1 <= value <= 2**31 - 1:
            return f"{at}.{key}", f"must be a whole number of at least 1 (or unset: no limit), got {value}"
    return None


def budget_problem(budget: BudgetConfig) -> tuple[str, str] | None:
    for key in ("usd_per_day", "usd_per_month"):
        value = getattr(budget, key)
        if value is not None and not (math.isfinite(value) and value > 0):
            return f"budget.{key}", f"must be a positive number of USD (or unset: no budget), got {value}"
    return None


class TelemetryConfig(_Section):
    """OpenTelemetry export over OTLP/HTTP; off unless `enabled` or `otlp_endpoint` is set."""

    enabled: bool = False
    #: The collector's base URL (`/v1/traces` and `/v1/metrics` are appended); unset: the
    #: standard OTEL_EXPORTER_OTLP_* variables, else http://localhost:4318.
    otlp_endpoint: str | None = None
    #: Spans as protobuf or JSON (both encoded by trunkline, at about the same cost);
    #: unset: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL, else
    #: http/protobuf. Metrics go as protobuf.
    otlp_protocol: Literal["http/protobuf", "http/json"] | None = None
    #: Extra request headers for the collector. Secrets belong in OTEL_EXPORTER_OTLP_HEADERS.
    otlp_headers: dict[str, str] = msgspec.field(default_factory=dict)
    #: Export bodies gzipped, spans and metrics; unset: OTEL_EXPORTER_OTLP_TRACES_COMPRESSION
    #: (METRICS_ for metrics) or OTEL_EXPORTER_OTLP_COMPRESSION, else none.
    otlp_compression: Literal["gzip", "none"] | None = None
    service_name: str = "trunkline"
    traces: bool = True
    metrics: bool = True
    #: Seconds between metric exports; unset: OTEL_METRIC_EXPORT_INTERVAL, else 60.
    metric_interval_s: float | None = None
    #: Put prompts, answers and tool definitions on the spans (they may hold personal data).
    capture_content: bool = False

    @property
    def on(self) -> bool:
        return (self.enabled or self.otlp_endpoint is not None) and (self.traces or self.metrics)


# -- routes (issue 31): a model name served by several deployments ---------------------

#: Error classes a route falls back on unless its `fallback_on` says otherwise (a
#: `timeout` only when listed: a slow generation is often slow anywhere, and billed).
FALLBACK_ON_DEFAULT = ("rate_limit", "server_error", "unavailable", "network")
#: Classes a `fallback_on` may name: those a second try elsewhere can cure.
FALLBACK_CLASSES = ("rate_limit", "server_error", "unavailable", "network", "timeout", "model_not_loaded")


class DeploymentLimits(_Section):
    """A deployment's own limits (None: none): requests and tokens per minute (a sliding
    60-second window), requests in parallel."""

    rpm: int | None = None
    tpm: int | None = None
    parallel: int | None = None


class DeploymentConfig(_Section):
    """One way to serve a route: a provider instance and its model. `id` defaults to
    `<route>/<n>` (n from 1); `key_env` names one of the provider's `keys_env` variables
    when it has several keys; `weight` is its share (strategy weighted), `priority` its
    rank (strategy priority, lowest first)."""

    provider: str
    model: str
    id: str | None = None
    key_env: str | None = None
    weight: float = 1.0
    priority: int = 0
    limits: DeploymentLimits = msgspec.field(default_factory=DeploymentLimits)


class BreakerConfig(_Section):
    """The circuit breaker: `failures` retryable failures of a deployment within
    `window_s` cool it for `cooldown_s`, then it is tried again."""

    failures: int = 3
    window_s: float = 60.0
    cooldown_s: float = 30.0


class RouteConfig(_Section):
    strategy: Literal["weighted", "least_busy", "priority"] = "weighted"
    deployments: list[DeploymentConfig] = msgspec.field(default_factory=list)
    fallback: bool = True
    fallback_on: list[str] = msgspec.field(default_factory=lambda: list(FALLBACK_ON_DEFAULT))
    breaker: BreakerConfig = msgspec.field(default_factory=BreakerConfig)


class SharedStateConfig(_Section):
    """Limits, budgets, cooldowns and request ids shared by every daemon that names the
    same Redis; without `redis` (or `redis_env`) they live in the daemon's memory."""

    #: `redis://[user:pass@]host:port/db`, or `rediss://` for TLS (the system's CAs).
    redis: str | None = None
    #: Or the name of an environment variable holding that URL (a URL may carry a password).
    redis_env: str | None = None
    #: Every key is `{<key_prefix>}:...`: one hash tag, so one Redis Cluster slot.
    key_prefix: str = "trunkline"
    #: Longest wait for one Redis call before deciding locally (degraded).
    timeout_s: float = 0.25
    #: A CA file for `rediss://` besides the system's.
    tls_ca_file: str | None = None

    @property
    def on(self) -> bool:
        return self.redis is not None or self.redis_env is not None

    def url(self) -> str | None:
        """The Redis URL, from the file or the variable (read when called: at the daemon's
        start). Raises ConfigError naming the key, never the URL's password."""
        if self.redis_env is None:
            return self.redis
        url = os.environ.get(self.redis_env, "").strip()
        if not url:
            raise ConfigError(f"config error at `shared_state.redis_env`: {self.redis_env} is not set (or empty)")
        problem = redis_url_problem(url)
        if problem:
            raise ConfigError(f"config error at `shared_state.redis_env` (${self.redis_env}): {problem}")
        return url


def redis_url_problem(url: str) -> str | None:
    """Why a shared_state Redis URL cannot be used, or None (never says its password)."""
    try:
        parse_url(url)
    except BadRedisUrl as exc:
        return f"{exc} (e.g. redis://:password@127.0.0.1:6379/0, or rediss:// for TLS)"
    return None


def shared_state_problem(shared: SharedStateConfig) -> tuple[str, str] | None:
    """The key and why the shared state cannot be used as configured, or None."""
    if shared.redis is not None and shared.redis_env is not None:
        return "redis_env", "give redis or redis_env, not both"
    if shared.redis is not None:
        problem = redis_url_problem(shared.redis)
        if problem:
            return "redis", problem
    if shared.redis_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", shared.redis_env):
        return "redis_env", "must name an environment variable (letters, digits, _)"
    if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", shared.key_prefix):
        return "key_prefix", "1 to 64 letters, digits or _.:- (no braces: it is the keys' hash tag)"
    if not (math.isfinite(shared.timeout_s) and 0 < shared.timeout_s <= 60):
        return "timeout_s", f"must be in (0, 60] seconds, got {shared.timeout_s}"
    if shared.tls_ca_file is not None and not Path(shared.tls_ca_file).expanduser().is_file():
        return "tls_ca_file", f"{shared.tls_ca_file!r} is not a readable file"
    return None


class Config(_Section):
    runtime_dir: str | None = None
    state_dir: str | None = None
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    endpoints: Endpoints = msgspec.field(default_factory=Endpoints)
    limits: LimitsConfig = msgspec.field(default_factory=LimitsConfig)
    supervision: Supervision = msgspec.field(default_factory=Supervision)
    retry: RetryPolicy = msgspec.field(default_factory=RetryPolicy)
    timeouts: TimeoutPolicy = msgspec.field(default_factory=TimeoutPolicy)
    replay: ReplayConfig = msgspec.field(default_factory=ReplayConfig)
    metrics: MetricsConfig = msgspec.field(default_factory=MetricsConfig)
    http: HttpConfig = msgspec.field(default_factory=HttpConfig)
    telemetry: TelemetryConfig = msgspec.field(default_factory=TelemetryConfig)
    autostart: Autostart = msgspec.field(default_factory=Autostart)
    shared_state: SharedStateConfig = msgspec.field(default_factory=SharedStateConfig)
    providers: dict[str, ProviderConfig] = msgspec.field(default_factory=dict)
    #: Named client keys (front-door keys and protocol tokens) with their limits and budgets.
    clients: dict[str, ClientKeyConfig] = msgspec.field(default_factory=dict)
    #: Extra catalog entries (for example models of a local server), by canonical id;
    #: each is written as `ModelInfo` without what its id and the catalog give.
    models: dict[str, ModelInfo] = msgspec.field(default_factory=dict)
    #: Routes: model names served by several deployments, with fallbacks (see RouteConfig).
    routes: dict[str, RouteConfig] = msgspec.field(default_factory=dict)
    #: Which file each top-level value came from (for messages), not read from YAML.
    source: str = ""
    #: Settings given on `trunkline serve`'s command line, laid over the file's (a reload
    #: lays them over the file again); not read from YAML.
    overrides: dict[str, Any] = msgspec.field(default_factory=dict)
    #: What loading changed from what the file and environment said, for the daemon to log
    #: at start (an operator must not learn it from a provider that behaves oddly); not
    #: read from YAML.
    notices: list[str] = msgspec.field(default_factory=list)

    def client_key_variables(self) -> list[str]:
        """The variables holding named client keys (which no worker may inherit)."""
        return [entry.key_env for entry in self.clients.values() if entry.key_env]

    def provider_retry(self, name: str) -> RetryPolicy:
        return self.providers[name].retry or self.retry

    def provider_timeouts(self, name: str) -> TimeoutPolicy:
        return self.providers[name].timeouts or self.timeouts

    def resolved_runtime_dir(self) -> Path:
        return Path(self.runtime_dir).expanduser() if self.runtime_dir else default_runtime_dir()

    def resolved_state_dir(self) -> Path:
        if self.state_dir:
            return Path(self.state_dir).expanduser()
        base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
        return Path(base) / "trunkline"

    def endpoint(self, which: Literal["control", "events"], runtime_dir: Path | None = None) -> str:
        value: str = getattr(self.endpoints, which)
        if "://" in value:
            return value
        return f"ipc://{(runtime_dir or self.resolved_runtime_dir()) / value}"


class WorkerSettings(msgspec.Struct, kw_only=True):
    """What the supervisor hands a worker process it starts (no secrets: the
    worker reads its API key from the environment it inherits)."""

    name: str
    provider: ProviderConfig
    retry: RetryPolicy
    timeouts: TimeoutPolicy
    link: str
    generation: int
    state_dir: str
    heartbeat_interval_s: float = 1.0
    log_level: str = "info"
    supervisor_pid: int = 0
    max_response_bytes: int = 32 * 1024 * 1024


class FrontDoorSettings(msgspec.Struct, kw_only=True):
    """What the supervisor hands each front-door process it starts: the listening
    socket it bound (so a restart never refuses a connection), its end of a socket
    pair (the process says `ready` on it, and its end of file is the supervisor's),
    and where the daemon's control socket is. Keys are read by the process itself."""

    index: int
    listen_fd: int
    link_fd: int
    control: str
    http: HttpConfig
    log_level: str = "info"
    #: The named client keys (where each is read from, never the key): the door tells
    #: the daemon which one a request came with.
    clients: dict[str, ClientKeyConfig] = msgspec.field(default_factory=dict)
    #: The daemon's secret for this start: a hello with it makes the connection the
    #: door's, whose `Submit.client_key` the daemon trusts. Never logged.
    door_secret: str = ""


def default_runtime_dir() -> Path:
    """Where the daemon's sockets live unless configured otherwise."""
    env = os.environ.get("TRUNKLINE_RUNTIME_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and Path(xdg).is_dir():
        return Path(xdg) / "trunkline"
    return Path(f"/tmp/trunkline-{os.getuid()}")


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"config error in {path}: cannot read file: {exc.strerror}") from None
    from .yaml_file import YAMLError, load_unique  # only where a file is read: see yaml_file

    try:
        data = load_unique(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"config error in {path}: invalid YAML{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config error in {path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


#: Config fields the loader fills in itself, never keys of a file.
_NOT_FROM_YAML = ("source", "overrides")
_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_UNKNOWN = re.compile(r"Object contains unknown field `(?P<field>[^`]*)`")
_ENUM = re.compile(r"Invalid enum value (?P<value>'[^']*'|\S+)")
_PART = re.compile(r"\.([^.\[\]]+)|\[([^\]]*)\]")


def _type_at(root: Any, raw_path: str) -> Any:
    """The declared type at a msgspec error path (`.retry.jitter`, `.rules.sampling[0]`)
    under `root`, or None when the path leaves the declared types."""
    t = root
    for name, _ in _PART.findall(raw_path):
        t = _unwrap(t)
        if isinstance(t, type) and issubclass(t, msgspec.Struct):
            field = next((f for f in msgspec.structs.fields(t) if f.encode_name == name), None) if name else None
            if field is None:
                return None
            t = field.type
        elif typing.get_origin(t) in (dict, list):
            t = typing.get_args(t)[-1]
        else:
            return None
    return _unwrap(t)


def _unwrap(t: Any) -> Any:
    """`X | None` as `X`; a union of several kinds stays as it is."""
    if typing.get_origin(t) in (typing.Union, types.UnionType):
        kinds = [a for a in typing.get_args(t) if a is not type(None)]
        if len(kinds) == 1:
            return kinds[0]
    return t


def _hint(what: str, root: Any, raw_path: str, unknown: str | None) -> str:
    """ "Did you mean" for an unknown key or a value outside a fixed set."""
    if unknown is not None:
        struct = _type_at(root, raw_path)
        if isinstance(struct, type) and issubclass(struct, msgspec.Struct):
            hidden = _NOT_FROM_YAML if struct is Config else SET_BY_THE_CATALOG.get(struct, ())
            return did_you_mean(
                unknown, [f.encode_name for f in msgspec.structs.fields(struct) if f.encode_name not in hidden]
            )
        return ""
    enum = _ENUM.match(what)
    literal = _type_at(root, raw_path)
    if enum is None or typing.get_origin(literal) is not Literal:
        return ""
    values = [str(v) for v in typing.get_args(literal)]
    return f"{did_you_mean(enum.group('value').strip(chr(39)), values)} (one of: {', '.join(values)})"


def _key_path(raw: str) -> str:
    return raw.lstrip(".").replace("`", "")


def _has_path(data: Any, path: str) -> bool:
    node = data
    for part in re.findall(r"[^.\[\]]+", path):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True


def _explain(
    exc: msgspec.ValidationError,
    user: dict[str, Any],
    user_path: Path | None,
    prefix: str = "",
    root: Any = None,
) -> ConfigError:
    match = _AT.match(str(exc))
    what = match.group("what") if match else str(exc)
    raw_path = (match.group("path") or "") if match else ""
    path = _key_path(raw_path)
    if prefix:
        path = f"{prefix}.{path}" if path else prefix
    unknown = _UNKNOWN.match(what)
    hint = _hint(what, root or Config, raw_path, unknown.group("field") if unknown else None)
    if unknown:
        path = f"{path}.{unknown.group('field')}" if path else unknown.group("field")
        what = "unknown key"
    else:
        what = what[0].lower() + what[1:] if what else what
    source = user_path if user_path is not None and _has_path(user, path) else DEFAULTS_PATH
    return ConfigError(f"config error in {source} at `{path or '(top level)'}`: {what}{hint}")


def load_config(
    path: str | Path | None = None, *, use_user_default: bool = True, overrides: dict[str, Any] | None = None
) -> Config:
    """Defaults, then `path` (or the user's default file when it exists) over them, then
    `overrides` (settings given on the command line) over both."""
    defaults = _read_yaml(DEFAULTS_PATH)
    user_path: Path | None = None
    if path is not None:
        user_path = Path(path).expanduser()
        if not user_path.exists():
            raise ConfigError(f"config error in {user_path}: file not found")
    elif use_user_default and USER_CONFIG_PATH.expanduser().exists():
        user_path = USER_CONFIG_PATH.expanduser()
    user = _read_yaml(user_path) if user_path is not None else {}
    for internal in _NOT_FROM_YAML:
        if internal in user:
            raise ConfigError(f"config error in {user_path} at `{internal}`: unknown key")
    merged = _merge(_merge(defaults, user), overrides or {})
    # msgspec names a bad dict entry `[...]`; check the named sections entry by entry
    # so the message can say which provider or model is wrong.
    providers = merged.get("providers")
    if isinstance(providers, dict):
        for key, value in providers.items():
            if isinstance(value, dict) and value.get("keys_env"):
                providers[key] = _keys_replace_key(key, value, user, user_path)
            try:
                msgspec.convert(value, ProviderConfig)
            except msgspec.ValidationError as exc:
                raise _explain(exc, user, user_path, prefix=f"providers.{key}", root=ProviderConfig) from None
    # Each entry of a named section checked alone, so an error names its own key path.
    for section, root in (("routes", RouteConfig), ("clients", ClientKeyConfig)):
        entries_of = merged.get(section)
        if isinstance(entries_of, dict):
            for key, value in entries_of.items():
                try:
                    msgspec.convert(value, root)
                except msgspec.ValidationError as exc:
                    raise _explain(exc, user, user_path, prefix=f"{section}.{key}", root=root) from None
    models = merged.get("models")
    if isinstance(models, dict):
        entries: dict[str, ModelInfo] = {}
        for key, value in models.items():
            try:
                entries[key] = model_entry(key, value)
            except msgspec.ValidationError as exc:
                raise _explain(exc, user, user_path, prefix=f"models.{key}", root=ModelInfo) from None
        merged["models"] = entries
    try:
        config = msgspec.convert(merged, Config)
    except msgspec.ValidationError as exc:
        raise _explain(exc, user, user_path) from None
    config.source = str(user_path or DEFAULTS_PATH)
    config.overrides = overrides or {}
    _check(config, user_path or DEFAULTS_PATH)
    return config


def _keys_replace_key(
    name: str, provider: dict[str, Any], user: dict[str, Any], user_path: Path | None
) -> dict[str, Any]:
    """A provider that lists `keys_env` uses those keys and no other: the `api_key_env`
    the shipped defaults give it is dropped. A file that gives both is refused, since
    they disagree on what a second variable means (a fallback, or one more key)."""
    mine = (user.get("providers") or {}).get(name)
    if isinstance(mine, dict) and mine.get("api_key_env") is not None and mine.get("keys_env"):
        raise ConfigError(
            f"config error in {user_path} at `providers.{name}.keys_env`: give api_key_env (one key: the first "
            "variable set) or keys_env (every variable a key of its own, used in turn), not both"
        )
    return {k: v for k, v in provider.items() if k != "api_key_env"}


#: What an environment variable's name may be (`keys_env`).
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_keys(name: str, provider: ProviderConfig, config: Config, source: Path) -> None:
    """`keys_env` names variables, each once; the ones not set are left out (said by
    name, never by value), and none set leaves the provider not configured as a missing
    `api_key_env` does."""
    where = f"config error in {source} at `providers.{name}"
    seen: set[str] = set()
    for variable in provider.keys_env:
        if not _VARIABLE.fullmatch(variable):
            raise ConfigError(f"{where}.keys_env`: {variable!r} is not an environment variable name")
        if variable in seen:
            raise ConfigError(f"{where}.keys_env`: {variable} is listed twice")
        seen.add(variable)
    if not (math.isfinite(provider.key_cooldown_s) and provider.key_cooldown_s > 0):
        raise ConfigError(
            f"{where}.key_cooldown_s`: must be a positive number of seconds, got {provider.key_cooldown_s}"
        )
    missing = [variable for variable in provider.keys_env if not os.environ.get(variable)]
    if provider.enabled and missing and len(missing) < len(provider.keys_env):
        used = len(provider.keys_env) - len(missing)
        config.notices.append(
            f"providers.{name}: {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set: "
            f"it uses {used} of its {len(provider.keys_env)} keys"
        )


_ENDPOINT = re.compile(r"^(?:ipc://.+|(?:tcp|tls\+tcp)://(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.*-]*):\d{1,5})$")


def endpoint_problem(value: str) -> str | None:
    """Why an endpoint cannot be listened on, or None: a file name in the runtime
    directory, `ipc://PATH`, or `tcp://HOST:PORT` / `tls+tcp://HOST:PORT`."""
    if "://" not in value:
        return (
            None
            if value and "/" not in value
            else (
                f"{value!r}: give a file name (made in the runtime "
                "directory), ipc://PATH, tcp://HOST:PORT or tls+tcp://HOST:PORT"
            )
        )
    if not _ENDPOINT.match(value):
        return f"{value!r} is not an endpoint: use ipc://PATH, tcp://HOST:PORT or tls+tcp://HOST:PORT"
    port = int(value.rsplit(":", 1)[1]) if not value.startswith("ipc://") else 1
    if not 0 < port < 65536:
        return f"{value!r}: the port must be 1-65535"
    return None


def listen_problem(section: _Listening, example: str, *, any_port: bool = False) -> str | None:
    """Why `listen` is no `HOST:PORT` to serve on, or None (`any_port`: port 0, a free
    one the system picks, is allowed)."""
    assert section.listen is not None
    if not re.fullmatch(r"(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]*):\d{1,5}", section.listen):
        return f"{section.listen!r} is not HOST:PORT (e.g. {example})"
    low = 0 if any_port else 1
    if not low <= section.address()[1] < 65536:
        return f"{section.listen!r}: the port must be {low}-65535"
    return None


def metrics_problem(metrics: MetricsConfig) -> tuple[str, str] | None:
    """The key and why the metrics endpoint cannot be served as configured, or None."""
    if metrics.bearer_token_file is not None and metrics.bearer_token_env is not None:
        return "bearer_token_env", "give bearer_token_file or bearer_token_env, not both"
    if metrics.listen is None:
        return None
    problem = listen_problem(metrics, "127.0.0.1:9464")
    if problem:
        return "listen", problem
    if not metrics.on_loopback and metrics.bearer_token_file is None and metrics.bearer_token_env is None:
        return "listen", (
            f"{metrics.listen!r} can be reached from other machines: set metrics.bearer_token_file "
            "(or bearer_token_env) so a scrape must bring a token, or listen on 127.0.0.1"
        )
    return None


def http_problem(http: HttpConfig, clients: bool = False) -> tuple[str, str] | None:
    """The key and why the front door cannot be served as configured, or None."""
    if http.listen is None:
        return None
    problem = listen_problem(http, "127.0.0.1:8300", any_port=True)
    if problem:
        return "listen", problem
    if not 1 <= http.processes <= 64:
        return "processes", f"{http.processes} is out of range [1, 64]"
    for key, low in (("max_body_bytes", 1024), ("max_header_bytes", 1024)):
        if getattr(http, key) < low:
            return key, f"must be at least {low}"
    if not http.on_loopback and http.keys_file is None and not http.keys_env and not clients:
        return "listen", (
            f"{http.listen!r} can be reached from other machines: set http.keys_file (or keys_env, or "
            "name keys under clients:) so every request must bring a key, or listen on 127.0.0.1"
        )
    return None


def base_url_problem(value: str, example: str = "https://api.example.com/v1") -> str | None:
    """Why a provider's base_url (or another URL the daemon calls) cannot be called, or None."""
    parsed = urllib.parse.urlsplit(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        return f"{value!r} is not an http(s) URL (e.g. {example})"
    try:
        parsed.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return f"{value!r} has a port that is not a number"
    return None


def _check(config: Config, source: Path) -> None:
    """Rules a schema cannot say."""
    for name in config.providers:
        if not re.fullmatch(r"[a-z][a-z0-9_-]{0,31}", name):
            raise ConfigError(
                f"config error in {source} at `providers.{name}`: provider names must match [a-z][a-z0-9_-]{{0,31}}"
            )
    for name, provider in config.providers.items():
        if isinstance(provider.api_key_env, list) and not provider.api_key_env:
            raise ConfigError(
                f"config error in {source} at `providers.{name}.api_key_env`: "
                "give at least one variable name (or leave the key out)"
            )
    for name, entry in config.clients.items():
        wrong = clients_problem(str(name), entry)
        if wrong:
            at = f"clients.{name}.{wrong[0]}" if wrong[0] else f"clients.{name}"
            raise ConfigError(f"config error in {source} at `{at}`: {wrong[1]}")
    for name, provider in config.providers.items():
        wrong = limits_problem(provider.limits, "limits") if provider.limits is not None else None
        if wrong:
            raise ConfigError(f"config error in {source} at `providers.{name}.{wrong[0]}`: {wrong[1]}")
    for model_id in config.models:
        if ":" not in model_id:
            raise ConfigError(f"config error in {source} at `models.{model_id}`: model ids are `provider:name`")
    if config.limits.max_response_bytes < 1024:
        raise ConfigError(f"config error in {source} at `limits.max_response_bytes`: must be at least 1024")
    for key, low, high in (
        ("max_message_bytes", 1024, 2**31 - 1),
        ("max_connections", 1, 1_000_000),
        ("subscriber_queue", 1, 8192),
        ("fd_reserve", 0, 1_000_000),
        ("max_requests_per_client", 1, 10_000_000),
        ("max_bytes_per_client", config.limits.max_message_bytes, 2**40),
    ):
        value = getattr(config.limits, key)
        if not low <= value <= high:
            raise ConfigError(f"config error in {source} at `limits.{key}`: {value} is out of range [{low}, {high}]")
    durations = [
        ("supervision", config.supervision),
        ("retry", config.retry),
        ("timeouts", config.timeouts),
        ("replay", config.replay),
        ("http", config.http),
        ("autostart", config.autostart),
    ]
    for name, provider in config.providers.items():
        durations += [(f"providers.{name}.{key}", getattr(provider, key)) for key in ("retry", "timeouts")]
    for scope, section in durations:
        if section is not None:
            _check_durations(scope, section, source)
    for key in ("ring_events", "max_request_bytes", "max_requests", "max_bytes"):
        if getattr(config.replay, key) < 1:
            raise ConfigError(
                f"config error in {source} at `replay.{key}`: must be at least 1, got {getattr(config.replay, key)}"
            )
    for which in ("control", "events"):
        problem = endpoint_problem(getattr(config.endpoints, which))
        if problem:
            raise ConfigError(f"config error in {source} at `endpoints.{which}`: {problem}")
    metrics = metrics_problem(config.metrics)
    if metrics:
        raise ConfigError(f"config error in {source} at `metrics.{metrics[0]}`: {metrics[1]}")
    http = http_problem(config.http, bool(config.clients))
    if http:
        raise ConfigError(f"config error in {source} at `http.{http[0]}`: {http[1]}")
    shared = shared_state_problem(config.shared_state)
    if shared:
        raise ConfigError(f"config error in {source} at `shared_state.{shared[0]}`: {shared[1]}")
    telemetry = config.telemetry
    if telemetry.otlp_endpoint is not None:
        problem = base_url_problem(telemetry.otlp_endpoint, "http://127.0.0.1:4318")
        if problem:
            raise ConfigError(f"config error in {source} at `telemetry.otlp_endpoint`: {problem}")
    if telemetry.metric_interval_s is not None and not (0 < telemetry.metric_interval_s <= 86400):
        raise ConfigError(
            f"config error in {source} at `telemetry.metric_interval_s`: must be in (0, 86400] "
            f"seconds, got {telemetry.metric_interval_s}"
        )
    for name, provider in config.providers.items():
        if provider.max_connections < 1:
            raise ConfigError(f"config error in {source} at `providers.{name}.max_connections`: must be at least 1")
        if provider.base_url is not None:
            problem = base_url_problem(provider.base_url)
            if problem:
                raise ConfigError(f"config error in {source} at `providers.{name}.base_url`: {problem}")
        _check_env_base_url(name, provider, config, source)
        _check_keys(name, provider, config, source)
        version = provider.options.get("anthropic_version")
        if provider.type == "anthropic" and version is not None and version not in ANTHROPIC_VERSIONS:
            raise ConfigError(
                f"config error in {source} at `providers.{name}.options.anthropic_version`: {version!r} is not "
                f"an Anthropic API version this worker speaks (one of: {', '.join(ANTHROPIC_VERSIONS)})"
            )
    if config.routes:
        _check_routes(config, source)
    for key in ("max_restarts",):
        if getattr(config.supervision, key) < 0:
            raise ConfigError(f"config error in {source} at `supervision.{key}`: must be >= 0")
    for scope, policy in [("retry", config.retry)] + [
        (f"providers.{n}.retry", p.retry) for n, p in config.providers.items() if p.retry
    ]:
        assert policy is not None
        if policy.max_retries < 0 or not 0 <= policy.jitter <= 1:
            raise ConfigError(
                f"config error in {source} at `{scope}`: max_retries must be >= 0 and jitter within [0, 1]"
            )
        if not (policy.multiplier > 0 and math.isfinite(policy.multiplier)):
            raise ConfigError(
                f"config error in {source} at `{scope}.multiplier`: must be a positive number, got {policy.multiplier}"
            )


def _check_env_base_url(name: str, provider: ProviderConfig, config: Config, source: Path) -> None:
    """The base URL a provider's variable gives must be one to call (its value is never
    said: a URL may hold credentials). One that names this daemon's own front door, as a
    shell set up for an SDK pointed at trunkline has it, is not followed: the provider
    would call itself."""
    url = provider.env_base_url()
    if url is None:
        return
    variable = provider.base_url_variable()
    if base_url_problem(url) is not None:
        raise ConfigError(
            f"config error in {source} at `providers.{name}.base_url_env`: ${variable} is set but holds "
            "no http(s) URL; set it to one (e.g. https://api.example.com) or unset it"
        )
    http = config.http
    if http.listen is not None:
        parsed = urllib.parse.urlsplit(url)
        default_port = 443 if parsed.scheme == "https" else 80
        if is_this_machine(parsed.hostname or "") and (parsed.port or default_port) == http.address()[1]:
            provider.base_url_env = ""
            provider.options.pop("base_url_env", None)
            config.notices.append(
                f"providers.{name}: ${variable} names this daemon's own front door (http.listen), so it "
                f"is not followed: the provider calls {provider.base_url or 'its default URL'}"
            )


_ROUTE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,63}")


def _check_routes(config: Config, source: Path) -> None:
    """Each route: a name no catalog model has, deployments of configured providers whose
    models resolve, unique ids (given `<route>/<n>` when unset), positive weights and
    limits, fallback classes a retry elsewhere can cure."""
    from .catalog import Catalog, UnknownModel  # the catalog imports this module

    catalog = Catalog.load(
        config.models, providers=config.providers, types={n: p.type for n, p in config.providers.items()}
    )
    ids: dict[str, str] = {}
    for name, route in config.routes.items():
        at = f"config error in {source} at `routes.{name}"
        if not _ROUTE_NAME.fullmatch(name):
            raise ConfigError(
                f"{at}`: a route name is 1-64 letters, digits, `.`, `_`, `-` or `/` (no `:`, which names a provider)"
            )
        try:
            shadowed = catalog.resolve(name)
        except UnknownModel:
            shadowed = None
        if shadowed is not None:
            raise ConfigError(
                f"{at}`: {name!r} already names the catalog model {shadowed.id!r}; give the route "
                "another name (a route never hides a model)"
            )
        if not route.deployments:
            raise ConfigError(f"{at}.deployments`: give at least one deployment")
        for cls in route.fallback_on:
            if cls not in FALLBACK_CLASSES:
                raise ConfigError(
                    f"{at}.fallback_on`: {cls!r} is not a class another deployment can cure "
                    f"(one of: {', '.join(FALLBACK_CLASSES)})"
                )
        breaker = route.breaker
        if breaker.failures < 1:
            raise ConfigError(f"{at}.breaker.failures`: must be at least 1, got {breaker.failures}")
        _check_durations(f"routes.{name}.breaker", breaker, source)
        for n, deployment in enumerate(route.deployments):
            where = f"{at}.deployments[{n}]"
            provider = config.providers.get(deployment.provider)
            if provider is None:
                raise ConfigError(
                    f"{where}.provider`: no provider {deployment.provider!r} is configured"
                    f"{did_you_mean(deployment.provider, config.providers)} (the providers are: "
                    f"{', '.join(sorted(config.providers))})"
                )
            try:
                catalog.resolve(deployment.model, deployment.provider)
            except UnknownModel as exc:
                raise ConfigError(f"{where}.model`: {exc}") from None
            if deployment.id is None:
                deployment.id = f"{name}/{n + 1}"
            if not deployment.id.strip() or len(deployment.id) > 128:
                raise ConfigError(f"{where}.id`: an id is 1-128 characters")
            if deployment.id in ids:
                raise ConfigError(
                    f"{where}.id`: {deployment.id!r} is already the id of a deployment of {ids[deployment.id]}"
                )
            if deployment.id.startswith("key:"):
                # The admission store keeps a provider key's rest under that prefix.
                raise ConfigError(f"{where}.id`: an id may not start with 'key:' (the daemon's own names do)")
            if deployment.id in config.providers:
                # A provider's `limits` are counted as a deployment named after it, in the
                # same admission store: a route deployment of that name would share them.
                raise ConfigError(
                    f"{where}.id`: {deployment.id!r} is the name of a provider; give the deployment another id"
                )
            ids[deployment.id] = f"route {name!r}"
            if not (deployment.weight > 0 and math.isfinite(deployment.weight)):
                raise ConfigError(f"{where}.weight`: must be a positive number, got {deployment.weight}")
            if deployment.key_env is not None and deployment.key_env not in provider_key_names(provider):
                raise ConfigError(
                    f"{where}.key_env`: {deployment.key_env!r} is not one of provider "
                    f"{deployment.provider!r}'s key variables ({', '.join(provider_key_names(provider)) or 'none'})"
                )
            for key in ("rpm", "tpm", "parallel"):
                value = getattr(deployment.limits, key)
                if value is not None and value < 1:
                    raise ConfigError(f"{where}.limits.{key}`: must be at least 1, got {value}")


def provider_key_names(provider: ProviderConfig) -> list[str]:
    """The variables a provider's keys come from, in order: its `keys_env` (several keys,
    used in turn) when it has them, else its `api_key_env`. A deployment's `key_env`
    names one of them; its index is the job's key index."""
    several = getattr(provider, "keys_env", None)
    if isinstance(several, list) and several:
        return [str(name) for name in several]
    return provider.key_env_names()


#: Durations for which zero means "no wait" (no pause, no delay, never wait a
#: Retry-After); every other duration must be more than zero.
_ZERO_MEANS_NO_WAIT = ("restart_backoff_s", "base_delay_s", "max_delay_s", "retry_after_cap_s")


def _check_durations(scope: str, section: msgspec.Struct, source: Path) -> None:
    """Every `*_s` setting of a section: a finite number of seconds, above zero unless
    zero means no wait. (A negative timeout or grace period would fire at once.)"""
    for key in section.__struct_fields__:
        value = getattr(section, key)
        if not key.endswith("_s") or value is None:
            continue
        zero_ok = key in _ZERO_MEANS_NO_WAIT
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
            need = "zero or a positive number" if zero_ok else "a positive number"
            raise ConfigError(f"config error in {source} at `{scope}.{key}`: must be {need} of seconds, got {value}")
