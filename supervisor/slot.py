"""One provider's worker: its process, its link, its restarts.

The slot outlives every process it starts. It listens on the link (the worker
dials), relays what the worker sends, and when the process dies it ends every
request that process held before deciding, by restart intensity, whether to
start another.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import trio

from ..config.loader import Config, ProviderConfig, RetryPolicy, Supervision, TimeoutPolicy, WorkerSettings
from ..protocol import codec, link, trace
from ..protocol.forkserver import LINK_FD
from ..protocol.link import Closed
from ..protocol.link import LinkConn as Conn
from ..protocol.messages import (
    CallEvents,
    CallResult,
    CheckReady,
    ErrorClass,
    ErrorInfo,
    EstimateTokens,
    Heartbeat,
    Job,
    KeyFailed,
    Progress,
    Relay,
    RelayBatch,
    Shutdown,
    StopJob,
    ToWorker,
    WorkerStatus,
    WorkerUp,
)
from . import spawn
from .admission.keyring import Keyring
from .forkserver import ForkServer
from .requests import RequestState, RequestTable
from .tree import Intensity

if TYPE_CHECKING:
    from .admission.key_rests import KeyRests  # only with shared state: its import is deferred

log = logging.getLogger("trunkline.supervisor")

State = Literal["starting", "running", "restarting", "unavailable", "not_configured", "stopped"]


@dataclass(frozen=True, slots=True)
class SlotTerms:
    """What a slot reads of the configuration: how it supervises (live: a reload hands
    the slot new terms) and what its next worker process is started with."""

    supervision: Supervision
    retry: RetryPolicy
    timeouts: TimeoutPolicy
    log_level: str
    max_response_bytes: int
    #: Every configured provider's key variables (and the client keys'): a worker inherits its own only.
    key_names: frozenset[str]

    @classmethod
    def of(cls, config: Config, name: str) -> SlotTerms:
        return cls(
            supervision=config.supervision,
            retry=config.provider_retry(name),
            timeouts=config.provider_timeouts(name),
            log_level=config.log_level,
            max_response_bytes=config.limits.max_response_bytes,
            key_names=frozenset(
                [*(key for p in config.providers.values() for key in p.key_env_names()), *config.client_key_variables()]
            ),
        )


class SlotEvents(Protocol):
    """What a slot tells the rest of the supervisor (the daemon's `EventRelay`): its
    worker's frames, bus events, and the requests it must end itself."""

    def relay(self, msg: Relay) -> None: ...

    def bus(self, name: str, **fields: Any) -> None: ...

    def fail_request(self, state: RequestState, error_class: ErrorClass, message: str) -> None: ...

    def finish_cancelled(self, state: RequestState, raw: str) -> None: ...

    def contain(self, request_id: str, doing: str, exc: BaseException) -> None: ...

    def fault(self, request_id: str | None, doing: str, exc: BaseException) -> None: ...


class WorkerSlot:
    """One provider's worker. It is given its provider's settings and `terms`, the
    request table (where its jobs' requests live: the slot keeps no list of its own)
    and `events`, through which it publishes and ends requests; `not_configured` is
    why it cannot run, if it cannot."""

    def __init__(
        self,
        name: str,
        config: ProviderConfig,
        terms: SlotTerms,
        *,
        state_dir: Path,
        requests: RequestTable,
        events: SlotEvents,
        not_configured: str | None = None,
        forks: ForkServer | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.terms = terms
        self.state_dir = state_dir
        self.requests = requests
        self.events = events
        #: Where its workers are forked from (`supervision.worker_start: forkserver`).
        self.forks = forks
        self.state: State = "not_configured" if not_configured else "starting"
        self.pid: int | None = None
        self.restarts = 0
        self.generation = 0
        self.last_error: str | None = not_configured
        self.last_heartbeat: float | None = None
        self.unreachable: str | None = None
        self.retry_at: float | None = None
        self.link: Conn | None = None  # to the current worker process
        self._up = trio.Event()
        self._outbound_send, self._outbound_recv = trio.open_memory_channel[ToWorker](10_000)
        self._queued = 0  # messages in the queue or being sent by the sender task
        self._calls: dict[int, tuple[trio.Event, list[CallResult]]] = {}
        self._call_ids = itertools.count(1)
        self._proc: spawn.WorkerProcess | None = None
        self._stopping = trio.Event()
        self.intensity = Intensity(terms.supervision.max_restarts, terms.supervision.restart_window_s)
        #: Its keys, given to its jobs in turn, when it has several (else None).
        self.keyring = Keyring.of(name, config)
        #: With shared state: where its keys' rests go to the other daemons.
        self.key_rests: KeyRests | None = None
        #: Whether its workers send each attempt's start and completion (`CallEvents`).
        self.call_events = True

    def reconfigure(self, terms: SlotTerms) -> None:
        """A reload's terms: supervision from now on, the rest for the next worker started.
        The crashes already counted still count against the new restart limits."""
        self.terms = terms
        self.intensity.max_restarts = terms.supervision.max_restarts
        self.intensity.window_s = terms.supervision.restart_window_s

    # -- status ----------------------------------------------------------------

    def status(self) -> WorkerStatus:
        now = trio.current_time()
        return WorkerStatus(
            provider=self.name,
            provider_type=self.config.type,
            state=self.state,
            pid=self.pid,
            restarts=self.restarts,
            in_flight=self.requests.count_of(self.name),
            last_error=self.last_error,
            last_heartbeat_s=round(now - self.last_heartbeat, 3) if self.last_heartbeat is not None else None,
            unreachable=self.unreachable if self.state == "running" else None,
            api_keys=self.keyring.use() if self.keyring is not None else [],
        )

    # -- sending to the worker -----------------------------------------------

    def send(self, msg: ToWorker) -> None:
        """Send a message to the worker: at once when the worker is up and nothing is
        waiting before it (a job then starts without a trip through the sender task),
        else through the queue, where jobs wait until a worker is up to take them."""
        if self.state == "running" and not self._queued:
            if isinstance(msg, Job):
                state = self._prepare_job(msg)
                if state is None:
                    return
                data = codec.encode(msg)
                # Stamped before the send: the worker may stamp its receipt before send returns.
                sent_ns = trace.now_ns() if state.trace is not None else 0
                if self.link is not None and self.link.send(data):
                    state.sent(data)
                    if sent_ns and state.trace is not None:
                        state.trace["job_sent"] = sent_ns
                    return
            elif self.link is not None and self.link.send(codec.encode(msg)):
                return
        try:
            self._outbound_send.send_nowait(msg)
            self._queued += 1
        except trio.WouldBlock:
            raise RuntimeError(f"worker {self.name}: outbound queue full") from None

    def want_call_events(self, send: bool) -> None:
        """Tell the worker (now, or when one is up) whether to send each attempt's
        `llm.call_started` and `llm.call_completed`."""
        if send != self.call_events:
            self.call_events = send
            if self.state == "running":
                self.send(CallEvents(send=send))

    def _prepare_job(self, job: Job) -> RequestState | None:
        """Stamp the job with the running worker's generation; None if its request has
        already ended (cancelled or failed while it waited)."""
        state = self.requests.get(job.request_id)
        if state is None or state.ended:
            return None
        job.generation = self.generation
        state.generation = self.generation
        return state

    def cancel(self, state: RequestState) -> None:
        """Ask the worker to stop a request; end it here if it never reached a worker,
        or if the worker cannot be told."""
        if state.ended:
            return
        if state.generation is None:
            self.events.finish_cancelled(state, "cancelled before start")
            return
        try:
            self.send(StopJob(request_id=state.request_id))
        except Exception as exc:  # noqa: BLE001 - its worker cannot be told (a full queue): end it here
            self.events.fault(state.request_id, "asking its worker to stop", exc)
            self.events.finish_cancelled(state, "cancelled; the worker could not be told")
            return
        if state.cancel_deadline is None:
            state.cancel_deadline = trio.current_time() + self.terms.supervision.cancel_grace_s

    async def call(self, msg: CheckReady | EstimateTokens, timeout_s: float) -> CallResult:
        """Ask the worker something and wait for its answer."""
        call_id = next(self._call_ids)
        msg.call_id = call_id
        done = trio.Event()
        box: list[CallResult] = []
        self._calls[call_id] = (done, box)
        try:
            self.send(msg)
            with trio.move_on_after(timeout_s):
                await done.wait()
        finally:
            self._calls.pop(call_id, None)
        if not box:
            return CallResult(
                call_id=call_id,
                ok=False,
                error=ErrorInfo(
                    error_class="timeout",
                    message=f"worker {self.name} did not answer within {timeout_s:g}s",
                    retryable=True,
                    provider=self.name,
                ),
            )
        return box[0]

    async def _sender(self) -> None:
        """Send what waited in the queue, in order, once a worker is up to read it."""
        async for msg in self._outbound_recv:
            try:
                while self.state != "running" and self.state not in ("unavailable", "stopped"):
                    await self._up.wait()
                if self.state != "running":
                    if isinstance(msg, Job):
                        waiting = self.requests.get(msg.request_id)
                        if waiting is not None and not waiting.ended:
                            self.events.fail_request(
                                waiting,
                                "unavailable",
                                f"provider {self.name} is unavailable: {self.last_error or 'its worker keeps failing'}",
                            )
                    continue  # anything else was a question for a worker that is not there: its caller times out
                state: RequestState | None = None
                if isinstance(msg, Job):
                    state = self._prepare_job(msg)
                    if state is None:
                        continue
                # Sent, or lost with a worker that just died (whose requests `_died` fails).
                if state is not None and state.trace is not None:
                    state.trace["job_sent"] = trace.now_ns()  # before the send: the worker may stamp first
                if self.link is not None:
                    try:
                        data = codec.encode(msg)
                    except Exception as exc:
                        if not isinstance(msg, Job):
                            raise
                        self.events.contain(msg.request_id, "sending it to its worker", exc)
                        continue
                    self.link.send(data)
                    if state is not None:
                        state.sent(data)
            finally:
                # Counted down only once sent: until then a direct send could overtake it.
                self._queued -= 1

    # -- receiving from the worker ---------------------------------------------

    async def _read_link(self, conn: Conn, done: trio.Event) -> None:
        try:
            while True:
                for data in await conn.receive():
                    self._on_message(data)
        except Closed:
            pass
        finally:
            done.set()

    def _on_message(self, data: bytes | bytearray) -> None:
        try:
            msg = codec.decode_from_worker(data)
        except codec.DecodeError as exc:
            log.error("worker %s sent an unreadable message: %s", self.name, exc)
            return
        # isinstance, not match: this runs for every link message, and a class pattern costs more.
        if isinstance(msg, Relay):
            self._relay(msg)
        elif isinstance(msg, RelayBatch):
            for relay in msg.relays:
                self._relay(relay)
        elif isinstance(msg, Heartbeat):
            self.last_heartbeat = trio.current_time()
            if msg.unreachable != self.unreachable:
                self.unreachable = msg.unreachable
                self.events.bus(
                    "worker.unreachable" if self.unreachable else "worker.reachable",
                    provider=self.name,
                    detail=self.unreachable,
                )
        elif isinstance(msg, Progress):
            state = self.requests.active.get(msg.request_id)
            if state is not None and not state.ended and state.generation == self.generation:
                state.progress = msg
        elif isinstance(msg, CallResult):
            pending = self._calls.get(msg.call_id)
            if pending is not None:
                pending[1].append(msg)
                pending[0].set()
        elif isinstance(msg, WorkerUp) and msg.generation == self.generation:
            self.state = "running"
            self.last_heartbeat = trio.current_time()
            self._up.set()
            if not self.call_events:  # a worker starts sending them
                self.send(CallEvents(send=False))
            self.events.bus("worker.up", provider=self.name, detail=f"pid {msg.pid}")
        elif isinstance(msg, KeyFailed) and self.keyring is not None:
            until = self.keyring.failed(msg.key_index, msg.error_class, msg.retry_after_s)
            if until is not None and self.key_rests is not None:
                self.key_rests.rested(self.name, msg.key_index, until)

    def _relay(self, relay: Relay) -> None:
        try:
            self.events.relay(relay)
        except Exception as exc:  # noqa: BLE001 - the last guard: one request fails, the link reads on
            self.events.contain(relay.request_id, "relaying its events", exc)

    # -- lifecycle ---------------------------------------------------------------

    def settings(self, link_fd: int) -> WorkerSettings:
        terms = self.terms
        return WorkerSettings(
            name=self.name,
            provider=self.config,
            retry=terms.retry,
            timeouts=terms.timeouts,
            link=f"fd:{link_fd}",
            generation=self.generation,
            state_dir=str(self.state_dir),
            heartbeat_interval_s=terms.supervision.heartbeat_interval_s,
            log_level=terms.log_level,
            supervisor_pid=os.getpid(),
            max_response_bytes=terms.max_response_bytes,
        )

    async def run(self) -> None:
        """Keep a worker alive until the daemon stops."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._sender)
                while not self._stopping.is_set():
                    self.generation += 1
                    self.state = "starting" if self.generation == 1 else "restarting"
                    code = await self._run_one(nursery)
                    if self._stopping.is_set():
                        break
                    self._died(code)
                    supervision = self.terms.supervision  # a reload's, from the next wait on
                    if self.intensity.allow(trio.current_time()):
                        self.restarts += 1
                        if self.intensity.recent > 1:
                            # A crash loop: pause. One crash after a healthy run restarts at
                            # once (its requests are waiting).
                            await trio.sleep(supervision.restart_backoff_s)
                        continue
                    self._give_up(supervision.unavailable_retry_s)
                    await trio.sleep(supervision.unavailable_retry_s)
                    self.intensity.reset()
                self.state = "stopped"
                nursery.cancel_scope.cancel()
        finally:
            # A worker whose start raced the shutdown (or a cancelled wait) must not outlive us.
            if self._proc is not None and self._proc.returncode is None:
                self._proc.kill()
            if self.link is not None:
                self.link.close()

    async def _run_one(self, nursery: trio.Nursery) -> int | None:
        """Start one worker process on a fresh link and wait for it to exit. Its exit
        status, or None if it could not start."""
        ours, theirs = link.socket_pair()
        try:
            others = self.terms.key_names.difference(self.config.key_env_names())
            self._proc = await self._fork(theirs, others)
            if self._proc is None:
                # A fork that failed may have left a worker holding this link (the fork
                # server died between the fork and its answer): a new link for the spawned
                # one, and that worker sees its link close and exits.
                ours.close()
                theirs.close()
                ours, theirs = link.socket_pair()
                self._proc = await spawn.start(
                    self.settings(theirs.fileno()), pass_fds=(theirs.fileno(),), other_keys=others
                )
                log.info("provider %s: worker %d spawned", self.name, self._proc.pid)
        except OSError as exc:
            self.last_error = f"cannot start worker: {exc}"
            ours.close()
            return None
        finally:
            theirs.close()
        self.pid = self._proc.pid
        conn = self.link = link.conn(ours, nursery)
        read_all = trio.Event()
        nursery.start_soon(self._read_link, conn, read_all)
        code = await self._proc.wait()
        # What the worker wrote before it exited is still in the socket: take it all
        # (its end of the link is closed now, so the reader soon sees the end).
        with trio.move_on_after(1.0):
            await read_all.wait()
        conn.close()
        return code

    async def _fork(self, link_end: socket.socket, others: frozenset[str]) -> spawn.WorkerProcess | None:
        """A worker forked by the fork server on `link_end`, with the settings and environment
        a spawned one gets; None when the fork server is not wanted or cannot fork now."""
        if self.forks is None or self.terms.supervision.worker_start != "forkserver":
            return None
        env = spawn.environment(self.settings(LINK_FD), others)
        forked = await self.forks.start_worker(self.name, env, link_end)
        if forked is not None:
            log.info("provider %s: worker %d forked", self.name, forked.pid)
        return forked

    def _died(self, code: int | None) -> None:
        if code is not None:
            how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
            self.last_error = f"worker process {self.pid} {how}"
        log.warning("provider %s: %s", self.name, self.last_error)
        self.state = "restarting"
        self._up.set()  # wake a sender waiting for the old generation; it waits again
        self._up = trio.Event()
        self.pid = None
        dead = self.generation
        for state in self.requests.of_provider(self.name):
            if state.generation == dead:
                self.events.fail_request(
                    state,
                    "unavailable",
                    f"the {self.name} worker died mid-request ({self.last_error}); retry the request",
                )
        for pending in self._calls.values():
            pending[0].set()
        self.events.bus("worker.exited", provider=self.name, detail=self.last_error)

    def _give_up(self, retry_in_s: float) -> None:
        self.state = "unavailable"
        self.retry_at = trio.current_time() + retry_in_s
        self._up.set()  # queued jobs fail at once
        self._up = trio.Event()
        for state in self.requests.of_provider(self.name):
            self.events.fail_request(state, "unavailable", f"provider {self.name} is unavailable: {self.last_error}")
        log.error(
            "provider %s: %d restarts within %gs; marked unavailable",
            self.name,
            self.intensity.max_restarts,
            self.intensity.window_s,
        )
        self.events.bus("worker.unavailable", provider=self.name, detail=self.last_error)

    def check_heartbeat(self, now: float) -> None:
        timeout = self.terms.supervision.heartbeat_timeout_s
        if self.state == "running" and self.last_heartbeat is not None and now - self.last_heartbeat > timeout:
            self.last_error = f"no heartbeat for {timeout:g}s"
            if self._proc is not None and self._proc.returncode is None:
                log.error("provider %s: worker hung (%s); killing it", self.name, self.last_error)
                self._proc.kill()

    async def stop(self, grace_s: float) -> None:
        self._stopping.set()
        proc = self._proc
        if proc is None or proc.returncode is not None:
            self.state = "stopped"
            return
        if (
            self.state == "running"
            and self.link is not None
            and self.link.send(codec.encode(Shutdown(grace_s=grace_s)))
        ):
            await spawn.stop(proc, grace_s + 2.0)
        else:
            await spawn.stop(proc, 0.0)  # not up yet (or not listening): nothing to drain
        self.state = "stopped"
