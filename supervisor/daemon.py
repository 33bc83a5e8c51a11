"""The supervisor process: sockets, workers, the request table, shutdown.

It binds the control Rep0 and the event Pub0 in a private runtime directory,
starts one worker slot per configured provider, answers control requests (see
`router`), relays worker events to the Pub0 and keeps them for `replay`.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ..config.catalog import Catalog
from ..config.loader import Config, ProviderConfig
from ..protocol import __version__, nng, trace
from ..protocol.codec import BUS_TOPIC, batch_frames, decode_event, frame_event, split_frame
from ..protocol.messages import (
    RETRYABLE,
    BusEvent,
    ErrorClass,
    ErrorEvent,
    ErrorInfo,
    Event,
    Finish,
    FinishReason,
    Message,
    Relay,
    Response,
    StopJob,
)
from .metrics import DaemonMetrics
from .metrics_http import MetricsApp, MetricsServer
from .ratelog import RateLimitedLog
from .requests import RequestState, RequestTable, estimate_billing
from .slot import WorkerSlot

if TYPE_CHECKING:
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
    def __init__(self, config: Config, runtime_dir: Path | None = None) -> None:
        self.config = config
        self.runtime_dir = runtime_dir or config.resolved_runtime_dir()
        self.state_dir = config.resolved_state_dir()
        self.control_url = config.endpoint("control", self.runtime_dir)
        self.events_url = config.endpoint("events", self.runtime_dir)
        providers = {n: p for n, p in config.providers.items() if p.enabled}
        # An OpenAI-compatible server is reached only through its base_url: without one
        # it is not configured, whatever its key.
        unreachable = {n for n, p in providers.items() if p.type == "openai_compat" and not p.resolved_base_url()}
        configured = [n for n, p in providers.items() if n not in unreachable and (not p.needs_key() or p.api_key())]
        self.catalog = Catalog.load(config.models, providers=providers, configured=configured)
        self.requests = RequestTable(
            config.replay.ring_events,
            config.replay.keep_s,
            config.replay.max_requests,
            config.replay.max_bytes,
            config.replay.max_request_bytes,
        )
        self.slots: dict[str, WorkerSlot] = {}
        for name, provider in providers.items():
            slot = WorkerSlot(self, name, provider)
            if name in unreachable:
                slot.state = "not_configured"
                slot.last_error = "no base_url: an OpenAI-compatible provider needs the server's URL"
            elif name not in configured:
                slot.state = "not_configured"
                slot.last_error = f"environment variable {provider.key_hint()} is not set"
            self.slots[name] = slot
        self.metrics = DaemonMetrics(self) if config.metrics.listen else None
        self.metrics_token = config.metrics.bearer_token() if config.metrics.listen else None
        self.metrics_server: MetricsServer | None = None
        self.telemetry = _telemetry(config, providers)
        self.accepting = True
        self.started_wall = time.time()
        self.started_at = 0.0
        self.pub: Any = None
        self.rep: Any = None
        self.drained = trio.Event()
        self.hurry = trio.Event()  # a second signal: skip the grace period
        # Set by `reload` (supervisor/reload.py): the config the running workers started
        # with, and per provider the retry/timeout policies its jobs carry since.
        self.spawned_config: Config | None = None
        self.job_policies: dict[str, tuple[dict[str, Any] | None, dict[str, Any] | None]] = {}
        self.fault_log = RateLimitedLog(log)
        from .router import Router

        self.router = Router(self)

    # -- publishing ----------------------------------------------------------------

    def publish(self, frame: bytes) -> None:
        self.pub.publish(frame)

    def bus(self, name: str, **fields: Any) -> None:
        self.publish(frame_event(BUS_TOPIC, BusEvent(name=name, **fields)))

    def relay(self, msg: Relay) -> None:
        """Publish a worker's frames and keep them for replay; drop those of requests
        the supervisor already ended (cancelled by timeout, or a previous generation)."""
        if not msg.request_id:
            self.pub.publish_many(msg.frames)  # bus events, each its own topic's message
            if self.metrics is not None or self.telemetry is not None:
                for frame in msg.frames:
                    self._observe_bus(decode_event(split_frame(frame)[1]))
            return
        state = self.requests.active.get(msg.request_id)
        if state is None:
            return
        if state.otel_chunks is not None:  # a stream's later chunk, for OpenTelemetry's metrics
            state.otel_chunks.arrived(trio.current_time())
        if not state.first_event and (self.metrics is not None or self.telemetry is not None):
            state.first_event = True
            if state.stream:
                waited = trio.current_time() - state.submitted_at
                if self.metrics is not None:
                    self.metrics.first_event(state, waited)
                if self.telemetry is not None:
                    self.telemetry.first_event(state, waited)
        if msg.terminal and state.trace is not None:
            state.trace["terminal_received"] = trace.now_ns()
        self.pub.publish_many(batch_frames(msg.frames))
        state.keep(msg.frames, self.requests.ring_bytes)
        state.last_seq = msg.last_seq
        if msg.terminal:
            if state.trace is not None:
                state.trace["terminal_published"] = trace.now_ns()
                self.bus("trace.supervisor", request_id=state.request_id, detail=trace.detail(state.trace))
            self._ended(state)

    def _observe_bus(self, event: Any) -> None:
        if type(event) is not BusEvent:
            return
        if self.metrics is not None:
            self.metrics.bus(event)
        if self.telemetry is not None and event.request_id:
            self.telemetry.bus(event, self.requests.active.get(event.request_id))

    def _ended(self, state: RequestState) -> None:
        now = trio.current_time()
        logging_it = log.isEnabledFor(logging.INFO)
        if logging_it or self.metrics is not None or self.telemetry is not None:
            try:
                terminal = _terminal(state)
                if logging_it:
                    log.info(
                        "request %s %s %s: %s in %.0f ms",
                        state.request_id,
                        state.model,
                        "stream" if state.stream else "complete",
                        _outcome(terminal),
                        (now - state.submitted_at) * 1000,
                    )
                if self.metrics is not None:
                    self.metrics.ended(state, terminal, now - state.submitted_at)
                if self.telemetry is not None:
                    self.telemetry.ended(state, terminal, now - state.submitted_at)
            except Exception as exc:  # noqa: BLE001 - a log line or a metric must never keep a request open
                self.fault(state.request_id, "recording its end", exc)
        self.requests.end(state, now)
        slot = self.slots.get(state.provider)
        if slot is not None:
            slot.in_flight.discard(state.request_id)
        if not self.requests.active and not self.accepting:
            self.drained.set()

    def _publish_own(self, state: RequestState, event: Event) -> None:
        event.request_id = state.request_id
        event.seq = state.last_seq + 1
        frame = frame_event(state.client_id, event)
        self.publish(frame)
        state.keep([frame], self.requests.ring_bytes)
        state.last_seq = event.seq

    def _end_here(self, state: RequestState, terminal: Callable[[Response | None], Event]) -> None:
        """End a request with the supervisor's own events, in its sequence: the end of
        every part the worker left open, then `terminal(partial response)`."""
        if state.ended:
            return
        try:
            partial = self._partial(state)
        except Exception as exc:  # noqa: BLE001 - the terminal event goes out whatever its partial
            self.fault(state.request_id, "gathering its partial response", exc)
            partial = None
        try:
            self._publish_own(state, terminal(partial))
        except Exception as exc:  # noqa: BLE001
            self.fault(state.request_id, "sending its terminal event", exc)
            if partial is not None:
                self._publish_own(state, terminal(None))
        self._ended(state)

    def _partial(self, state: RequestState) -> Response | None:
        """What a request the supervisor ends itself had received, with its parts closed
        and its bill estimated."""
        if not state.stream and state.progress is not None and state.progress.content:
            # A whole-response request: what its worker last reported having gathered.
            partial = Response(
                model=state.progress.model,
                provider=state.provider,
                message=Message(role="assistant", content=state.progress.content),
                finish_reason=FinishReason(reason="error"),
            )
        elif state.stream and state.last_seq >= 0:
            acc = state.accumulator()
            for ev in acc.closing_events():
                self._publish_own(state, ev)
                acc.feed(ev)
            partial = acc.response()
            partial.provider = state.provider
        else:
            return None
        try:
            estimate_billing(state, partial, trio.current_time())
        except Exception as exc:  # noqa: BLE001 - the content is worth more than the estimate
            self.fault(state.request_id, "estimating its bill", exc)
        return partial

    def fault(self, request_id: str | None, doing: str, exc: BaseException) -> None:
        """The last guard's log: a bug met while handling one request, in one line (at
        most a few a second, whatever the input), the traceback at debug level."""
        self.fault_log.note(
            f"request {request_id}: internal error while {doing}: {type(exc).__name__}: {str(exc)[:200]}"
        )
        log.debug("request %s: traceback", request_id, exc_info=exc)

    def contain(self, request_id: str, doing: str, exc: BaseException) -> None:
        """The last guard: an exception while handling one request fails that request
        alone (class `other`), and the daemon keeps serving every other."""
        self.fault(request_id, doing, exc)
        state = self.requests.active.get(request_id)
        if state is not None and not state.ended:
            self.fail_request(
                state, "other", f"the daemon failed while {doing} ({type(exc).__name__}); other requests are unaffected"
            )

    def fail_request(self, state: RequestState, error_class: ErrorClass, message: str) -> None:
        info = ErrorInfo(
            error_class=error_class, message=message, retryable=RETRYABLE[error_class], provider=state.provider
        )
        self._end_here(state, lambda partial: ErrorEvent(error=info, partial=partial))

    def finish_cancelled(self, state: RequestState, raw: str) -> None:
        def finish(partial: Response | None) -> Event:
            response = partial or Response(provider=state.provider)
            response.finish_reason = FinishReason(reason="cancelled", raw=raw)
            return Finish(response=response)

        self._end_here(state, finish)

    def cancel_request(self, state: RequestState) -> None:
        """Ask the worker to stop; end it here if it never reached a worker."""
        if state.ended:
            return
        if state.generation is None:
            self.finish_cancelled(state, "cancelled before start")
            return
        slot = self.slots[state.provider]
        try:
            slot.send(StopJob(request_id=state.request_id))
        except Exception as exc:  # noqa: BLE001 - its worker cannot be told (a full queue): end it here
            self.fault(state.request_id, "asking its worker to stop", exc)
            self.finish_cancelled(state, "cancelled; the worker could not be told")
            return
        if state.cancel_deadline is None:
            state.cancel_deadline = trio.current_time() + self.config.supervision.cancel_grace_s

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
                    self.finish_cancelled(state, "worker did not confirm the cancel")
            for slot in self.slots.values():
                slot.check_heartbeat(now)

    # -- lifecycle -----------------------------------------------------------------

    def _bind(self) -> None:
        urls = (self.control_url, self.events_url)
        try:
            for url in urls:
                nng.check_url(url)
        except ValueError as exc:
            raise StartupError(str(exc)) from None
        if any(nng.ipc_path(url) is not None for url in urls):
            prepare_runtime_dir(self.runtime_dir)
        if self.router.needs_token and not self.router.token:
            raise StartupError(f"the network control endpoint {self.control_url} needs a token: set TRUNKLINE_TOKEN")
        tls = self._tls() if any(nng.is_tls(url) for url in urls) else None
        soft, hard = nng.raise_fd_limit()
        limits = self.config.limits
        if soft < 2 * limits.fd_reserve:
            log.warning("only %d file descriptors may be open (hard limit %d): few connections will fit", soft, hard)
        try:
            self.rep = nng.ControlServer(
                self.control_url,
                max_size=limits.max_message_bytes,
                max_connections=limits.max_connections,
                fd_reserve=limits.fd_reserve,
                tls=tls if nng.is_tls(self.control_url) else None,
                on_gone=self.router.pipe_gone,
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
            self.rep.close()
            raise StartupError(f"another trunkline daemon is already serving {self.events_url}") from None
        except (ValueError, OSError, nng.NNGException) as exc:
            self.rep.close()
            raise StartupError(f"cannot listen on {self.events_url}: {exc}") from None

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
        self._bind()
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
        try:
            async with trio.open_nursery() as nursery:
                workers = await nursery.start(self._run_workers)
                await nursery.start(self._reload_on_sighup)  # before any client can ask for one
                nursery.start_soon(self.router.serve, nursery)
                nursery.start_soon(self._housekeeping)
                with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    task_status.started()
                    async for signum in signals:
                        log.info("received %s: draining", signal.Signals(signum).name)
                        break

                    async def hurry_on_second_signal() -> None:
                        async for signum in signals:
                            log.info("received %s again: cancelling what is left", signal.Signals(signum).name)
                            self.hurry.set()

                    nursery.start_soon(hurry_on_second_signal)
                    await self.shutdown(workers)
                nursery.cancel_scope.cancel()
        finally:
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

    def _serve_metrics(self, metrics: DaemonMetrics) -> None:
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
        from .reload import reload

        with trio.open_signal_receiver(signal.SIGHUP) as signals:
            task_status.started()
            async for _ in signals:
                reload(self)

    async def _run_workers(self, *, task_status: trio.TaskStatus[trio.Nursery]) -> None:
        async with trio.open_nursery() as nursery:
            for slot in self.slots.values():
                if slot.state != "not_configured":
                    nursery.start_soon(slot.run)
            task_status.started(nursery)

    async def shutdown(self, workers: trio.Nursery) -> None:
        """Stop accepting; let in-flight requests finish within the grace period;
        cancel the rest; stop the workers."""
        cfg = self.config.supervision
        self.accepting = False
        if self.requests.active:
            with trio.move_on_after(cfg.shutdown_grace_s):
                async with trio.open_nursery() as race:

                    async def wait_for(event: trio.Event) -> None:
                        await event.wait()
                        race.cancel_scope.cancel()

                    race.start_soon(wait_for, self.drained)
                    race.start_soon(wait_for, self.hurry)
        for state in list(self.requests.active.values()):
            self.cancel_request(state)
        if self.requests.active:
            with trio.move_on_after(min(cfg.cancel_grace_s, 2.0)):
                await self.drained.wait()
        for state in list(self.requests.active.values()):
            self.finish_cancelled(state, "shutdown")
        async with trio.open_nursery() as stopping:
            for slot in self.slots.values():
                stopping.start_soon(slot.stop, 2.0)
        workers.cancel_scope.cancel()
        # The last terminal events may still be in nng's queues: closing the socket
        # would drop them, so give them a moment to leave.
        await trio.sleep(0.2)
        log.info("stopped")


def main_serve(config_path: str | None, runtime_dir: Path | None, overrides: dict[str, Any] | None = None) -> int:
    """`trunkline serve`: run until SIGTERM or Ctrl-C. Returns the exit status.
    `overrides` (the command line's settings) are laid over the config file's."""
    import sys

    from ..config.loader import ConfigError, load_config

    try:
        config = load_config(config_path, overrides=overrides)
        daemon = Daemon(config, runtime_dir)
    except ConfigError as exc:
        print(f"trunkline: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        trio.run(daemon.run)
    except StartupError as exc:
        print(f"trunkline: {exc}", file=sys.stderr)
        return 1
    return 0


def _telemetry(config: Config, providers: dict[str, ProviderConfig]) -> Telemetry | None:
    if not config.telemetry.on or os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    from .telemetry import Telemetry  # the SDK is imported only when it is used

    return Telemetry(config.telemetry, providers)


def _terminal(state: RequestState) -> Any:
    """A request's terminal event, from its last frame (None if it cannot be read)."""
    if not state.ring:
        return None
    try:
        return decode_event(split_frame(state.ring[-1])[1])
    except Exception:  # noqa: BLE001 - a log line or a metric must never fail a request
        return None


def _outcome(event: Any) -> str:
    """How a request ended: the finish reason and tokens, or the error class."""
    if type(event) is Finish:
        usage = event.response.usage
        return f"{event.response.finish_reason.reason}, {usage.input_tokens} in / {usage.output_tokens} out"
    if type(event) is ErrorEvent:
        return f"error {event.error.error_class}"
    return "ended"
