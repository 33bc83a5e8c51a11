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
from typing import TYPE_CHECKING, Literal

import trio

from ..config.loader import ProviderConfig, WorkerSettings
from ..protocol import codec, link, trace
from ..protocol.link import Closed
from ..protocol.link import LinkConn as Conn
from ..protocol.messages import (
    CallResult,
    ErrorInfo,
    Heartbeat,
    Job,
    Msg,
    Progress,
    Relay,
    RelayBatch,
    Shutdown,
    WorkerStatus,
    WorkerUp,
)
from . import spawn
from .tree import Intensity

if TYPE_CHECKING:
    from .daemon import Daemon
    from .requests import RequestState

log = logging.getLogger("trunkline.supervisor")

State = Literal["starting", "running", "restarting", "unavailable", "not_configured", "stopped"]


class WorkerSlot:
    def __init__(self, daemon: Daemon, name: str, config: ProviderConfig) -> None:
        self.daemon = daemon
        self.name = name
        self.config = config
        self.state: State = "starting"
        self.pid: int | None = None
        self.restarts = 0
        self.generation = 0
        self.last_error: str | None = None
        self.last_heartbeat: float | None = None
        self.unreachable: str | None = None
        self.in_flight: set[str] = set()
        self.retry_at: float | None = None
        self.link: Conn | None = None  # to the current worker process
        self._up = trio.Event()
        self._outbound_send, self._outbound_recv = trio.open_memory_channel[Msg](10_000)
        self._queued = 0  # messages in the queue or being sent by the sender task
        self._calls: dict[int, tuple[trio.Event, list[CallResult]]] = {}
        self._call_ids = itertools.count(1)
        self._proc: trio.Process | None = None
        self._stopping = False
        cfg = daemon.config.supervision
        self.intensity = Intensity(cfg.max_restarts, cfg.restart_window_s)

    # -- status ----------------------------------------------------------------

    def status(self) -> WorkerStatus:
        now = trio.current_time()
        return WorkerStatus(
            provider=self.name,
            provider_type=self.config.type,
            state=self.state,
            pid=self.pid,
            restarts=self.restarts,
            in_flight=len(self.in_flight),
            last_error=self.last_error,
            last_heartbeat_s=round(now - self.last_heartbeat, 3) if self.last_heartbeat is not None else None,
            unreachable=self.unreachable if self.state == "running" else None,
        )

    @property
    def accepting(self) -> bool:
        return self.state in ("starting", "running", "restarting")

    # -- sending to the worker -----------------------------------------------

    def send(self, msg: Msg) -> None:
        """Send a message to the worker: at once when the worker is up and nothing is
        waiting before it (a job then starts without a trip through the sender task),
        else through the queue, where jobs wait until a worker is up to take them."""
        if self.state == "running" and not self._queued:
            if type(msg) is Job:
                state = self._prepare_job(msg)  # type: ignore[arg-type]
                if state is None:
                    return
            data = codec.encode(msg)
            # Stamped before the send: the worker may stamp its receipt before send returns.
            sent_ns = trace.now_ns() if type(msg) is Job and state.trace is not None else 0
            if self.link is not None and self.link.send(data):
                if type(msg) is Job:
                    state.sent(data)
                if sent_ns:
                    state.trace["job_sent"] = sent_ns
                return
        try:
            self._outbound_send.send_nowait(msg)
            self._queued += 1
        except trio.WouldBlock:
            raise RuntimeError(f"worker {self.name}: outbound queue full") from None

    def _prepare_job(self, job: Job) -> RequestState | None:
        """Stamp the job with the running worker's generation; None if its request has
        already ended (cancelled or failed while it waited)."""
        state = self.daemon.requests.get(job.request_id)
        if state is None or state.ended:
            return None
        job.generation = self.generation
        state.generation = self.generation
        return state

    async def call(self, msg: Msg, timeout_s: float) -> CallResult:
        """Ask the worker something and wait for its answer."""
        call_id = next(self._call_ids)
        msg.call_id = call_id  # type: ignore[attr-defined]
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
                    if type(msg) is Job:
                        state = self.daemon.requests.get(msg.request_id)
                        if state is not None and not state.ended:
                            self.daemon.fail_request(
                                state,
                                "unavailable",
                                f"provider {self.name} is unavailable: {self.last_error or 'its worker keeps failing'}",
                            )
                    continue  # anything else was a question for a worker that is not there: its caller times out
                state = None
                if type(msg) is Job:
                    state = self._prepare_job(msg)  # type: ignore[arg-type]
                    if state is None:
                        continue
                # Sent, or lost with a worker that just died (whose requests `_died` fails).
                if state is not None and state.trace is not None:
                    state.trace["job_sent"] = trace.now_ns()  # before the send: the worker may stamp first
                if self.link is not None:
                    try:
                        data = codec.encode(msg)
                    except Exception as exc:
                        if type(msg) is not Job:
                            raise
                        self.daemon.contain(msg.request_id, "sending it to its worker", exc)  # type: ignore[union-attr]
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
                    self._on_message(data)  # type: ignore[arg-type]
        except Closed:
            pass
        finally:
            done.set()

    def _on_message(self, data: bytes) -> None:
        daemon = self.daemon
        try:
            msg = codec.decode_from_worker(data)
        except codec.DecodeError as exc:
            log.error("worker %s sent an unreadable message: %s", self.name, exc)
            return
        t = type(msg)
        if t is Relay:
            self._relay(msg)  # type: ignore[arg-type]
        elif t is RelayBatch:
            for relay in msg.relays:  # type: ignore[union-attr]
                self._relay(relay)
        elif t is Heartbeat:
            self.last_heartbeat = trio.current_time()
            if msg.unreachable != self.unreachable:  # type: ignore[union-attr]
                self.unreachable = msg.unreachable  # type: ignore[union-attr]
                daemon.bus(
                    "worker.unreachable" if self.unreachable else "worker.reachable",
                    provider=self.name,
                    detail=self.unreachable,
                )
        elif t is Progress:
            state = daemon.requests.active.get(msg.request_id)  # type: ignore[union-attr]
            if state is not None and not state.ended and state.generation == self.generation:
                state.progress = msg  # type: ignore[assignment]
        elif t is CallResult:
            pending = self._calls.get(msg.call_id)  # type: ignore[union-attr]
            if pending is not None:
                pending[1].append(msg)  # type: ignore[arg-type]
                pending[0].set()
        elif t is WorkerUp:
            if msg.generation != self.generation:  # type: ignore[union-attr]
                return
            self.state = "running"
            self.last_heartbeat = trio.current_time()
            self._up.set()
            daemon.bus("worker.up", provider=self.name, detail=f"pid {msg.pid}")  # type: ignore[union-attr]

    def _relay(self, relay: Relay) -> None:
        try:
            self.daemon.relay(relay)
        except Exception as exc:  # noqa: BLE001 - the last guard: one request fails, the link reads on
            self.daemon.contain(relay.request_id, "relaying its events", exc)

    # -- lifecycle ---------------------------------------------------------------

    def settings(self, link_fd: int) -> WorkerSettings:
        d = self.daemon
        return WorkerSettings(
            name=self.name,
            provider=self.config,
            retry=d.config.provider_retry(self.name),
            timeouts=d.config.provider_timeouts(self.name),
            link=f"fd:{link_fd}",
            generation=self.generation,
            state_dir=str(d.state_dir),
            heartbeat_interval_s=d.config.supervision.heartbeat_interval_s,
            log_level=d.config.log_level,
            supervisor_pid=os.getpid(),
            max_response_bytes=d.config.limits.max_response_bytes,
        )

    async def run(self) -> None:
        """Keep a worker alive until the daemon stops."""
        cfg = self.daemon.config.supervision
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._sender)
                while not self._stopping:
                    self.generation += 1
                    self.state = "starting" if self.generation == 1 else "restarting"
                    code = await self._run_one(nursery)
                    if self._stopping:
                        break
                    self._died(code)
                    if self.intensity.allow(trio.current_time()):
                        self.restarts += 1
                        await trio.sleep(cfg.restart_backoff_s)
                        continue
                    self._give_up()
                    await trio.sleep(cfg.unavailable_retry_s)
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
            own = set(self.config.key_env_names())
            others = {name for p in self.daemon.config.providers.values() for name in p.key_env_names()} - own
            self._proc = await spawn.start(
                self.settings(theirs.fileno()), pass_fds=(theirs.fileno(),), other_keys=others
            )
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
        for request_id in list(self.in_flight):
            state = self.daemon.requests.get(request_id)
            if state is None or state.ended:
                self.in_flight.discard(request_id)
            elif state.generation == dead:
                self.daemon.fail_request(
                    state,
                    "unavailable",
                    f"the {self.name} worker died mid-request ({self.last_error}); retry the request",
                )
        for pending in self._calls.values():
            pending[0].set()
        self.daemon.bus("worker.exited", provider=self.name, detail=self.last_error)

    def _give_up(self) -> None:
        self.state = "unavailable"
        self.retry_at = trio.current_time() + self.daemon.config.supervision.unavailable_retry_s
        self._up.set()  # queued jobs fail at once
        self._up = trio.Event()
        for request_id in list(self.in_flight):
            state = self.daemon.requests.get(request_id)
            if state is not None and not state.ended:
                self.daemon.fail_request(
                    state, "unavailable", f"provider {self.name} is unavailable: {self.last_error}"
                )
        log.error(
            "provider %s: %d restarts within %gs; marked unavailable",
            self.name,
            self.intensity.max_restarts,
            self.intensity.window_s,
        )
        self.daemon.bus("worker.unavailable", provider=self.name, detail=self.last_error)

    def check_heartbeat(self, now: float) -> None:
        timeout = self.daemon.config.supervision.heartbeat_timeout_s
        if self.state == "running" and self.last_heartbeat is not None and now - self.last_heartbeat > timeout:
            self.last_error = f"no heartbeat for {timeout:g}s"
            if self._proc is not None and self._proc.returncode is None:
                log.error("provider %s: worker hung (%s); killing it", self.name, self.last_error)
                self._proc.kill()

    async def stop(self, grace_s: float) -> None:
        self._stopping = True
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
