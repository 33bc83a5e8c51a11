"""The supervisor process, the root of its tree: the configuration, the sockets, the
request table, reload and shutdown.

It binds the control Rep0 and the event Pub0 in a private runtime directory and runs
its children: one worker slot per configured provider (`slot`), the router that
answers control requests (`router`), and the event relay that publishes what
workers send, keeps it for `replay` and ends requests (`relay`).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ..config.catalog import Catalog
from ..config.loader import AUTOSTART_LOCK, Config, ConfigError, ProviderConfig, Supervision, client_keys
from ..protocol import __version__, nng
from ..protocol.ids import ulid
from ..protocol.messages import ErrorInfo, ReloadResult, WorkerStatus
from .admission.gate import Gate
from .admission.keys import ClientKeys
from .admission.memory import MemoryStore
from .admission.routes import Route, Routing, build_routes
from .admission.store import Limits
from .forkserver import ForkServer
from .frontdoor import FrontDoor, new_secret
from .launch import Launched
from .relay import EventRelay
from .reload import Reloaded, reread
from .request_log import DAEMON_FORMAT, daemon_log_handler
from .requests import RequestTable
from .router import Router
from .slot import SlotTerms, WorkerSlot

if TYPE_CHECKING:
    # prometheus_client and its HTTP server are imported only when `metrics.listen` is
    # set (about 1.7 MiB of the supervisor's memory otherwise, and 35 ms of its start).
    from .admission.key_rests import KeyRests
    from .admission.remote import SharedRequests
    from .admission.shared import SharedStore
    from .metrics import DaemonMetrics, Worker
    from .metrics_http import MetricsServer
    from .telemetry import Telemetry

log = logging.getLogger("trunkline.supervisor")

#: Seconds the daemon waits at exit for the OpenTelemetry exporters to send what is pending.
TELEMETRY_FLUSH_S = 5.0


class StartupError(Exception):
    """The daemon cannot start (another daemon holds the endpoint, a bad directory...)."""


def prepare_runtime_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    if st.st_uid != os.getuid():
        raise StartupError(f"runtime dir {path} belongs to another user")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)


class Daemon:
    """The root of the supervisor's tree. It owns the configuration and the catalog
    (replaced only by `reload`, which hands each child its part), the sockets, the
    request table, and its children: the `EventRelay` (events out, ends of requests),
    one `WorkerSlot` per provider, the `Router`, and the metrics and telemetry when
    they are on. Each child is given what it uses; none holds the daemon."""

    def __init__(
        self,
        config: Config,
        runtime_dir: Path | None = None,
        *,
        exit_when_idle: bool = False,
        fork_server: Launched | None = None,
    ) -> None:
        self.config = config
        #: Started by a client (autostart): exit after `autostart.idle_exit_s` without clients.
        self.exit_when_idle = exit_when_idle
        self.last_client_at = 0.0  # when a client last disconnected (trio's clock)
        self._exit_lock: int | None = None  # the autostart lock, held from an idle exit to the process's end
        #: What the daemon and its workers started with: a reload reports what differs from it.
        self.started_with = config
        self.runtime_dir = runtime_dir or config.resolved_runtime_dir()
        self.state_dir = config.resolved_state_dir()
        self.control_url = config.endpoint("control", self.runtime_dir)
        self.events_url = config.endpoint("events", self.runtime_dir)
        providers = {n: p for n, p in config.providers.items() if p.enabled}
        # An OpenAI-compatible server is reached only through its base_url: without one
        # it is not configured, whatever its key.
        unreachable = {n for n, p in providers.items() if p.type == "openai_compat" and not p.resolved_base_url()}
        configured = [n for n, p in providers.items() if n not in unreachable and (not p.needs_key() or p.api_key())]
        self.catalog = Catalog.load(
            config.models, providers=providers, configured=configured, types={n: p.type for n, p in providers.items()}
        )
        self.requests = RequestTable(
            config.replay.ring_events,
            config.replay.keep_s,
            config.replay.max_requests,
            config.replay.max_bytes,
            config.replay.max_request_bytes,
        )
        self.slots: dict[str, WorkerSlot] = {}  # filled below
        #: Every child process the metrics report on, by name: the worker slots and the
        #: front door's processes (read at each scrape).
        self.children: dict[str, Worker] = {}
        self.metrics = _metrics(self.requests, self.children) if config.metrics.listen else None
        self.metrics_token = config.metrics.bearer_token() if config.metrics.listen else None
        self.metrics_server: MetricsServer | None = None
        self.telemetry = _telemetry(config, providers)
        self.events = EventRelay(self.requests, metrics=self.metrics, telemetry=self.telemetry)
        #: Where workers are forked from (`supervision.worker_start`); started before them.
        self.forks = ForkServer(
            os.environ,
            [*(key for p in config.providers.values() for key in p.key_env_names()), *config.client_key_variables()],
            {name: p.type for name, p in providers.items()},
            fork_server,
        )
        self.forks.want(config.supervision.worker_start == "forkserver")
        for name, provider in providers.items():
            not_configured = None
            if name in unreachable:
                not_configured = "no base_url: an OpenAI-compatible provider needs the server's URL"
            elif name not in configured:
                not_configured = f"environment variable {provider.key_hint()} is not set"
            self.slots[name] = self.children[name] = WorkerSlot(
                name,
                provider,
                SlotTerms.of(config, name),
                state_dir=self.state_dir,
                requests=self.requests,
                events=self.events,
                not_configured=not_configured,
                forks=self.forks,
            )
        # Client keys, limits and budgets: read (keys) and built at start; nothing when none
        # are configured. The front door's secret makes its connections the ones whose
        # `Submit.client_key` is trusted.
        self.door_secret = new_secret() if config.http.listen else None
        self.client_keys = ClientKeys(
            client_keys(config), token=os.environ.get("TRUNKLINE_TOKEN"), door_secret=self.door_secret
        )
        #: Shared state (`shared_state`): the store and the claims of request ids across
        #: daemons. Built before the gate, which then decides on it: a submit's key limits,
        #: budgets, its provider's limits and the claim of its id are one round trip.
        self.shared_store, shared = _shared_state(config, self.events.publish)
        self.gate = Gate.of(config, store=self.shared_store, hooks=self.metrics)
        self.events.gate = self.gate
        self.router = Router(
            requests=self.requests,
            slots=self.slots,
            catalog=self.catalog,
            limits=config.limits,
            replay=config.replay,
            events_url=self.events_url,
            needs_token=nng.is_remote(self.control_url),
            publish=self.events.publish,
            reload=self.reload,
            on_refused=self.metrics.refused_submit if self.metrics is not None else None,
            on_started=self.telemetry.started if self.telemetry is not None else None,
            more_status=self._front_door_status,
            routing=self._routing(config),
            gate=self.gate,
            client_keys=self.client_keys,
        )
        self.router.shared = shared
        #: With shared state, the rests of providers' several keys go to every daemon.
        self.key_rests: KeyRests | None = None
        keyrings = {name: slot.keyring for name, slot in self.slots.items() if slot.keyring is not None}
        if self.shared_store is not None and keyrings:
            from .admission.key_rests import KeyRests

            self.key_rests = KeyRests(self.shared_store, keyrings)
            for name in keyrings:
                self.slots[name].key_rests = self.key_rests
        self.router.on_bus_watch = self._bus_watch
        self._bus_watch(False)  # until a client that may watch the bus says hello
        if shared is not None:
            # Without a gate the claim is a ticket of its own, which its end must settle.
            shared.settles_claims = self.gate is None
            if self.gate is not None:
                self.gate.unclaim = shared.unclaim  # a request refused after its admission frees its id
            self.events.on_end = shared.ended
            if self.metrics is not None and self.shared_store is not None:
                from .admission.shared import SharedStateCollector

                self.metrics.registry.register(SharedStateCollector(self.shared_store))
        #: The HTTP front door (`http.listen`), once its socket is bound; its keys are
        #: read here so that a key file that cannot be used stops the start.
        self.frontdoor: FrontDoor | None = None
        self.http_keys = config.http.keys() if config.http.listen else []
        self.started_wall = time.time()
        self.started_at = 0.0
        self.pub: nng.EventPublisher | None = None
        self.rep: nng.ControlServer | None = None
        self.hurry = trio.Event()  # a second signal: skip the grace period
        self._nursery: trio.Nursery | None = None  # the daemon's, once it runs

    def _routing(self, config: Config) -> Routing | None:
        """The routes, over the admission store; None without any, so that a submit
        never looks for one."""
        if not config.routes:
            return None
        routes = build_routes(config, self.catalog)
        # With a gate, a routed request is decided on its store with its key, in one ticket
        # (the shared store: every daemon sees the deployments' limits and cooldowns).
        routing = Routing(
            routes,
            MemoryStore(claim_s=config.replay.keep_s),
            slots=self.slots,
            requests=self.requests,
            bus=self.events.bus,
            metrics=self.metrics,
            gate=self.gate,
        )
        routing.deliver = self.events.relay
        if self.gate is not None:
            self.gate.route_deployments = _route_limits(routes)
        self.events.routing = routing
        return routing

    def _reroute(self, config: Config) -> None:
        """A reload's routes, from the next request (what the store and this daemon know
        of each deployment, its use and cooldown, stays)."""
        routing = self.router.routing
        if routing is not None:
            routing.routes = build_routes(config, self.catalog)
            if self.gate is not None:
                self.gate.route_deployments = _route_limits(routing.routes)
        elif config.routes:
            self.router.routing = self._routing(config)
            if self.router.routing is not None and self._nursery is not None:
                self._nursery.start_soon(self.router.routing.read_cooling)

    # -- reload ----------------------------------------------------------------------

    def reload(self) -> ReloadResult:
        """`trunkline reload` and SIGHUP: the config file and the catalog read again; a
        file that cannot be used changes nothing."""
        try:
            change = reread(self.config, self.started_with, self.catalog, self.slots)
        except ConfigError as exc:
            log.warning("reload refused, the running configuration stays: %s", exc)
            self.events.bus("config.reload_failed", error_class="invalid_request", detail=str(exc))
            return ReloadResult(
                ok=False,
                error=ErrorInfo(error_class="invalid_request", message=str(exc)),
                pricing_version=self.catalog.pricing_version,
                config_path=self.config.source,
            )
        self._apply(change)
        restart = change.restart_needed
        detail = f"pricing {self.catalog.pricing_version}" + (
            f"; needs a restart: {', '.join(restart)}" if restart else ""
        )
        log.info("reloaded %s: %s", self.config.source, detail)
        self.events.bus("config.reloaded", detail=detail)
        return ReloadResult(
            ok=True,
            pricing_version=self.catalog.pricing_version,
            config_path=self.config.source,
            restart_needed=restart,
        )

    def _apply(self, change: Reloaded) -> None:
        """A reload's configuration: the daemon's own record, the router's catalog and job
        policies (from the next request), each slot's terms (supervision at once)."""
        self.config = change.config
        self.catalog = change.catalog
        self.router.reconfigure(change.catalog, change.job_policies)
        self._reroute(change.config)
        for name, slot in self.slots.items():
            slot.reconfigure(SlotTerms.of(change.config, name))
        self.forks.want(change.config.supervision.worker_start == "forkserver")

    # -- housekeeping ----------------------------------------------------------------

    async def _housekeeping(self) -> None:
        while True:
            await trio.sleep(0.25)
            now = trio.current_time()
            self.requests.expire(now)
            for state in list(self.requests.active.values()):
                if state.cancel_deadline is not None and now > state.cancel_deadline:
                    # The worker did not confirm the cancel in time: end it here; its
                    # late events, if any, are dropped by `relay`.
                    self.events.finish_cancelled(state, "worker did not confirm the cancel")
            for slot in self.slots.values():
                slot.check_heartbeat(now)
            self.events.request_log.flush()

    # -- lifecycle -----------------------------------------------------------------

    def _bind(self) -> nng.ControlServer:
        """Listen on the control and event endpoints; the event socket goes to the relay."""
        urls = (self.control_url, self.events_url)
        try:
            for url in urls:
                nng.check_url(url)
        except ValueError as exc:
            raise StartupError(str(exc)) from None
        if any(nng.ipc_path(url) is not None for url in urls):
            prepare_runtime_dir(self.runtime_dir)
        if self.router.needs_token and not self.router.token and not self.client_keys.names:
            raise StartupError(f"the network control endpoint {self.control_url} needs a token: set TRUNKLINE_TOKEN")
        tls = self._tls() if any(nng.is_tls(url) for url in urls) else None
        soft, hard = nng.raise_fd_limit()
        limits = self.config.limits
        if soft < 2 * limits.fd_reserve:
            log.warning("only %d file descriptors may be open (hard limit %d): few connections will fit", soft, hard)
        try:
            rep = self.rep = nng.ControlServer(
                self.control_url,
                max_size=limits.max_message_bytes,
                max_connections=limits.max_connections,
                fd_reserve=limits.fd_reserve,
                tls=tls if nng.is_tls(self.control_url) else None,
                on_gone=self._connection_gone,
            )
        except nng.AddressInUse:
            raise StartupError(f"another trunkline daemon is already serving {self.control_url}") from None
        except (ValueError, OSError, nng.NNGException) as exc:
            raise StartupError(f"cannot listen on {self.control_url}: {exc}") from None
        try:
            self.pub = nng.EventPublisher(
                self.events_url,
                queue=limits.subscriber_queue,
                max_connections=limits.max_connections,
                fd_reserve=limits.fd_reserve,
                tls=tls if nng.is_tls(self.events_url) else None,
            )
        except nng.AddressInUse:
            rep.close()
            raise StartupError(f"another trunkline daemon is already serving {self.events_url}") from None
        except (ValueError, OSError, nng.NNGException) as exc:
            rep.close()
            raise StartupError(f"cannot listen on {self.events_url}: {exc}") from None
        self.events.pub = self.pub
        http = self.config.http
        if http.listen:
            try:
                self.frontdoor = FrontDoor(
                    http,
                    control=self.control_url,
                    supervision=self.config.supervision,
                    log_level=self.config.log_level,
                    provider_keys=frozenset(k for p in self.config.providers.values() for k in p.key_env_names()),
                    clients=self.config.clients,
                    secret=self.door_secret or new_secret(),
                )
            except OSError as exc:
                rep.close()
                self.pub.close()
                raise StartupError(f"cannot serve the HTTP front door on {http.listen}: {exc}") from None
            for process in self.frontdoor.processes:
                self.children[process.name] = process
        return rep

    def _bus_watch(self, watched: bool) -> None:
        self.events.bus_watched = watched
        # Spans count a request's attempts by `llm.call_started`; nothing else in the
        # daemon reads it or `llm.call_completed`.
        send = watched or self.telemetry is not None
        for slot in self.slots.values():
            slot.want_call_events(send)

    def _front_door_status(self) -> list[WorkerStatus]:
        return self.frontdoor.status() if self.frontdoor is not None else []

    def _tls(self) -> object:
        eps = self.config.endpoints
        if not eps.tls_cert_file or not eps.tls_key_file:
            raise StartupError("a tls+tcp endpoint needs endpoints.tls_cert_file and endpoints.tls_key_file")
        try:
            return nng.server_tls(eps.tls_cert_file, eps.tls_key_file)
        except (OSError, ValueError, nng.NNGException) as exc:
            raise StartupError(f"cannot load the TLS certificate or key: {exc}") from None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.started_at = trio.current_time()
        rep = self._bind()
        if self.metrics is not None:
            self._serve_metrics(self.metrics)
        if self.telemetry is not None:
            from .otel_http import shown

            self.telemetry.start()
            endpoint = self.config.telemetry.otlp_endpoint
            log.info(
                "OpenTelemetry export on (%s)", shown(endpoint) if endpoint else "the OTEL_EXPORTER_OTLP_* settings"
            )
        log.info("trunkline %s serving %s (events %s)", __version__, self.control_url, self.events_url)
        for notice in self.config.notices:
            log.warning("%s", notice)
        if self.exit_when_idle:
            log.info("exits after %gs without clients (autostart.idle_exit_s)", self.config.autostart.idle_exit_s)
        if self.shared_store is not None:
            log.info(
                "shared state on %s (keys {%s}:*)",
                self.shared_store.client.target.redacted(),
                self.config.shared_state.key_prefix,
            )
        try:
            async with trio.open_nursery() as nursery:
                if self.shared_store is not None and self.router.shared is not None:
                    await nursery.start(self.shared_store.run)
                    self.router.shared.nursery = nursery
                workers = await nursery.start(self._run_workers)
                await nursery.start(self._reload_on_sighup)  # before any client can ask for one
                if self.gate is not None:
                    self.gate.nursery = nursery  # a shared store settles in tasks of its own
                self._nursery = nursery
                if self.router.routing is not None:
                    nursery.start_soon(self.router.routing.read_cooling)  # returns at once without a shared store
                if self.key_rests is not None:
                    await nursery.start(self.key_rests.run)
                nursery.start_soon(self.router.serve, rep, nursery, self.started_at)
                if self.frontdoor is not None:
                    nursery.start_soon(self.frontdoor.run)
                    log.info(
                        "HTTP front door on %s (OpenAI and Anthropic APIs%s)",
                        self.frontdoor.url,
                        "; a key is required" if self.http_keys else "",
                    )
                nursery.start_soon(self._housekeeping)
                with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    task_status.started()
                    async with trio.open_nursery() as race:
                        race.start_soon(self._stop_on, race.cancel_scope, self._signalled, signals)
                        if self.exit_when_idle:
                            race.start_soon(self._stop_on, race.cancel_scope, self._idle)

                    async def hurry_on_second_signal() -> None:
                        async for signum in signals:
                            log.info("received %s again: cancelling what is left", signal.Signals(signum).name)
                            self.hurry.set()

                    nursery.start_soon(hurry_on_second_signal)
                    await self.shutdown(workers)
                nursery.cancel_scope.cancel()
        finally:
            self.events.request_log.flush()
            if self.frontdoor is not None:
                self.frontdoor.close()
            if self.metrics_server is not None:
                self.metrics_server.close()
            if self.rep is not None:
                self.rep.close()
            if self.pub is not None:
                self.pub.close()
            if self.telemetry is not None:
                # What is still batched goes to the collector; one that does not answer
                # holds the exit up for at most this long.
                with trio.move_on_after(TELEMETRY_FLUSH_S):
                    await trio.to_thread.run_sync(self.telemetry.shutdown, abandon_on_cancel=True)

    @staticmethod
    async def _stop_on(race: trio.CancelScope, reason: Callable[..., Awaitable[None]], *args: Any) -> None:
        """The first reason to stop that comes ends the race."""
        await reason(*args)
        race.cancel()

    @staticmethod
    async def _signalled(signals: AsyncIterator[int]) -> None:
        async for signum in signals:
            log.info("received %s: draining", signal.Signals(signum).name)
            return

    def _connection_gone(self, pipe_id: int) -> None:
        self.last_client_at = trio.current_time()  # a client that came and went between two looks is seen
        self.router.pipe_gone(pipe_id)

    def _busy(self) -> bool:
        """A client is connected (the front door's processes are clients too) or a
        request runs."""
        return bool((self.rep is not None and self.rep.gate.open) or self.requests.active)

    async def _idle(self) -> None:
        """Returns once no client has been connected and no request has run for
        `autostart.idle_exit_s` (read at each look, so a reload changes it), holding the
        autostart lock: a client connecting through it waits for this daemon's end and
        starts the next one, rather than reach a daemon on its way out."""
        idle_since = trio.current_time()
        while True:
            idle_s = self.config.autostart.idle_exit_s
            await trio.sleep(min(1.0, idle_s / 4))
            now = trio.current_time()
            idle_since = max(idle_since, self.last_client_at)
            if self._busy():
                idle_since = now
            elif now - idle_since >= idle_s and self._take_exit_lock():
                if not self._busy():
                    log.info("no client for %gs: exiting (started to exit when idle)", idle_s)
                    return
                self._release_exit_lock()
                idle_since = now

    def _take_exit_lock(self) -> bool:
        """The autostart lock, if no client holds it now (one that does is connecting)."""
        try:
            fd = os.open(self.runtime_dir / AUTOSTART_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            return True  # no runtime directory to share a lock in: nobody else uses one
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._exit_lock = fd
        return True

    def _release_exit_lock(self) -> None:
        if self._exit_lock is not None:
            with contextlib.suppress(OSError):
                os.close(self._exit_lock)
            self._exit_lock = None

    def _serve_metrics(self, metrics: DaemonMetrics) -> None:
        from .metrics_http import MetricsApp, MetricsServer

        cfg = self.config.metrics
        host, port = cfg.address()
        try:
            self.metrics_server = MetricsServer(host, port, MetricsApp(metrics.registry, self.metrics_token))
        except OSError as exc:
            raise StartupError(f"cannot serve metrics on {cfg.listen}: {exc}") from None
        self.metrics_server.start()
        shown = f"[{host}]" if ":" in host else host
        log.info(
            "metrics on http://%s:%d/metrics%s",
            shown,
            self.metrics_server.port,
            " (a bearer token is required)" if self.metrics_token else "",
        )

    async def _reload_on_sighup(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.open_signal_receiver(signal.SIGHUP) as signals:
            task_status.started()
            async for _ in signals:
                self.reload()

    async def _run_workers(self, *, task_status: trio.TaskStatus[trio.Nursery]) -> None:
        async with trio.open_nursery() as nursery:
            if any(slot.state != "not_configured" for slot in self.slots.values()):
                await nursery.start(self.forks.run)  # its process starts before any worker
            for slot in self.slots.values():
                if slot.state != "not_configured":
                    nursery.start_soon(slot.run)
            task_status.started(nursery)

    async def shutdown(self, workers: trio.Nursery) -> None:
        """Stop accepting (the front door too); let in-flight requests finish within the
        grace period; cancel the rest; stop the workers."""
        cfg = self.config.supervision
        self.router.stop_accepting()
        async with trio.open_nursery() as front:
            if self.frontdoor is not None:
                # It stops taking connections at once; its requests in flight are daemon
                # requests, which the drain below waits for (or cancels).
                front.start_soon(self.frontdoor.stop, cfg.shutdown_grace_s + 2.0)
            await self._drain(cfg)
        self.forks.want(False, "the daemon stops")  # no worker starts from here on
        async with trio.open_nursery() as stopping:
            for slot in self.slots.values():
                stopping.start_soon(slot.stop, 2.0)
        workers.cancel_scope.cancel()
        # The last terminal events may still be in nng's queues: closing the socket
        # would drop them, so give them a moment to leave.
        await trio.sleep(0.2)
        log.info("stopped")

    async def _drain(self, cfg: Supervision) -> None:
        drained = self.events.all_ended()
        if self.requests.active:
            with trio.move_on_after(cfg.shutdown_grace_s):
                async with trio.open_nursery() as race:

                    async def wait_for(event: trio.Event) -> None:
                        await event.wait()
                        race.cancel_scope.cancel()

                    race.start_soon(wait_for, drained)
                    race.start_soon(wait_for, self.hurry)
        for state in list(self.requests.active.values()):
            self.slots[state.provider].cancel(state)
        if self.requests.active:
            with trio.move_on_after(min(cfg.cancel_grace_s, 2.0)):
                await drained.wait()
        for state in list(self.requests.active.values()):
            self.events.finish_cancelled(state, "shutdown")


def main_serve(
    config_path: str | None,
    runtime_dir: Path | None,
    overrides: dict[str, Any] | None = None,
    *,
    exit_when_idle: bool = False,
    fork_server: Launched | None = None,
) -> int:
    """`trunkline serve`: run until SIGTERM or Ctrl-C (or, `exit_when_idle`, until no
    client has come for `autostart.idle_exit_s`). Returns the exit status. `overrides`
    (the command line's settings) are laid over the config file's; `fork_server` is the
    one `serve` started before it imported this module (`launch.start_early`)."""
    import sys

    from ..config.loader import load_config

    try:
        try:
            config = load_config(config_path, overrides=overrides)
            daemon = Daemon(config, runtime_dir, exit_when_idle=exit_when_idle, fork_server=fork_server)
        except ConfigError as exc:
            print(f"trunkline: {exc}", file=sys.stderr)
            return 2
        logging.basicConfig(
            level=config.log_level.upper(),
            format=DAEMON_FORMAT,
            handlers=[daemon_log_handler()],
        )
        try:
            trio.run(daemon.run)
        except StartupError as exc:
            print(f"trunkline: {exc}", file=sys.stderr)
            return 1
        return 0
    finally:
        # A fork server started early but never taken over (the daemon did not start)
        # must not outlive this process, nor write to its log after the error.
        if fork_server is not None:
            fork_server.abandon()


def _shared_state(config: Config, publish: Callable[[bytes], None]) -> tuple[SharedStore | None, SharedRequests | None]:
    """The shared store and the cross-daemon request ids, when `shared_state` names a Redis."""
    shared = config.shared_state
    url = shared.url()
    if url is None:
        return None, None
    # Imported only with shared state on: the store's Prometheus collector would bring
    # prometheus_client into every daemon.
    from .admission.redis_client import RedisClient
    from .admission.remote import QUEUE_MARGIN_S, SharedRequests
    from .admission.shared import SharedStore

    client = RedisClient(url, timeout_s=shared.timeout_s, tls_ca_file=shared.tls_ca_file)
    # The id names this daemon in claims and in the logs of the daemons that follow it.
    daemon = f"{socket.gethostname()}:{os.getpid()}:{ulid()[-6:].lower()}"
    store = SharedStore(client, daemon=daemon, prefix=shared.key_prefix, claim_s=config.replay.keep_s)
    requests = SharedRequests(
        store, keep_s=config.replay.keep_s, wait_s=config.timeouts.request_s + QUEUE_MARGIN_S, publish=publish
    )
    return store, requests


def _metrics(requests: RequestTable, children: dict[str, Worker]) -> DaemonMetrics:
    from .metrics import DaemonMetrics

    return DaemonMetrics(requests, children)


def _route_limits(routes: dict[str, Route]) -> dict[str, Limits]:
    """Every route's deployment by id, with its limits (shown in status beside the keys)."""
    return {d.id: d.limits for route in routes.values() for d in route.deployments}


def _telemetry(config: Config, providers: dict[str, ProviderConfig]) -> Telemetry | None:
    if not config.telemetry.on or os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    from .telemetry import Telemetry  # the SDK is imported only when it is used

    return Telemetry(config.telemetry, providers)
