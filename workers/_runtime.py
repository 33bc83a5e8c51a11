"""The worker process: one provider, many concurrent jobs, one link to the supervisor.

This module holds the only I/O loop of a worker. Per job it owns the cancel
scope, the overall deadline, the retry loop and the emitter; per process it
owns the adapter (and with it the HTTP pool), the tool-id map, heartbeats and
the outbox that batches events towards the supervisor.
"""

from __future__ import annotations

import logging
import os
import random
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import trio

from ..config.loader import RetryPolicy, TimeoutPolicy, WorkerSettings, max_event_bytes
from ..protocol import codec, link, provider_options, trace
from ..protocol.codec import BUS_TOPIC, frame_event
from ..protocol.link import Closed
from ..protocol.link import LinkConn as Conn
from ..protocol.messages import (
    BusEvent,
    CallEvents,
    CallResult,
    CheckReady,
    ErrorInfo,
    EstimateTokens,
    Heartbeat,
    Job,
    KeyFailed,
    Msg,
    Progress,
    Relay,
    RelayBatch,
    Shutdown,
    StopJob,
    ToolCallPart,
    ToolResultPart,
    WorkerUp,
)
from ._adapter import Adapter, Call, Deadlines
from ._emit import Emitter
from ._retry import decide
from ._toolids import ToolIdMap
from .errors import ProviderError, redact

log = logging.getLogger("trunkline.worker")

#: How often a worker checks that its provider's server answers (local servers only).
PROBE_INTERVAL_S = 15.0
#: How often idle pooled connections beyond recent need are closed.
TRIM_INTERVAL_S = 5.0
#: ... or sooner, after this many jobs. An idle connection costs every request made while it
#: sits in the pool (httpcore polls each idle socket and counts the pool once per idle
#: connection, at each request and each release): with the 16 a burst leaves, about 94,000
#: instructions per idle connection per request in a worker (valgrind), 30-40 µs here.
#: Opening one again costs about 1.5 ms of CPU (a local TLS 1.3 handshake, before any round
#: trip). Closed within 96 jobs of a burst's end (windows of 32, two of memory), a surplus
#: connection costs about what reopening it would.
TRIM_JOBS = 32


@dataclass(slots=True)
class _Batch:
    request_id: str
    frames: list[bytes]
    last_seq: int
    terminal: bool
    size: int = 0


class Outbox:
    """Everything a worker tells the supervisor. Control messages (heartbeats, answers,
    `worker_up`) go first, ahead of any events waiting: a worker busy with a flood of
    events must still look alive. Events keep their order; consecutive frames of one
    request travel in one link message, and a run of them in one `relay_batch`.

    Events wait here, not in the link: at most `HIGH_WATER` bytes are handed to the
    link at a time, so a control message never queues behind more than that. Past
    `HIGH_WATER` bytes waiting here the outbox is `full`, and the stream readers of
    the jobs wait for room (`wait_room`) before reading on from their providers."""

    #: Bytes the link may hold unsent before the outbox waits for the supervisor, and
    #: bytes of events waiting here before the stream readers are held back.
    HIGH_WATER = 4 * 1024 * 1024
    #: Largest run of relays sent as one link message.
    BATCH_BYTES = 1024 * 1024

    def __init__(self) -> None:
        self._queue: list[_Batch] = []
        self._urgent: list[bytes] = []
        self._bytes = 0  # frame bytes in `_queue`
        self._wake = trio.Event()
        self._room = trio.Event()
        self._room.set()
        self._conn: Conn | None = None

    def push_frames(self, request_id: str, frames: list[bytes], last_seq: int, terminal: bool) -> None:
        last = self._queue[-1] if self._queue else None
        size = 0
        for frame in frames:
            size += len(frame)
        if type(last) is _Batch and last.request_id == request_id and not last.terminal:
            last.frames.extend(frames)
            last.last_seq = last_seq
            last.terminal = terminal
            last.size += size
        else:
            self._queue.append(_Batch(request_id, list(frames), last_seq, terminal, size))
        self._bytes += size
        if self._bytes > self.HIGH_WATER and self._room.is_set():
            self._room = trio.Event()
        if terminal and self._conn is not None:
            # A request's end goes out now, not a scheduler turn later; waking the
            # outbox's task for it cost every request that turn, for nothing to send.
            self.flush_now()
        else:
            self._wake.set()

    def push(self, msg: Msg) -> None:
        self._urgent.append(codec.encode(msg))
        self._wake.set()

    def bus(self, name: str, **fields: Any) -> None:
        self.push_frames("", [frame_event(BUS_TOPIC, BusEvent(name=name, **fields))], -1, False)

    def empty(self) -> bool:
        return not self._queue and not self._urgent

    @property
    def full(self) -> bool:
        """More events wait here than the link should be given at once."""
        return self._bytes > self.HIGH_WATER

    async def wait_room(self) -> None:
        """Until the events waiting here are back under `HIGH_WATER`."""
        while self._bytes > self.HIGH_WATER:
            await self._room.wait()

    async def run(self, conn: Conn) -> None:
        self._conn = conn
        while True:
            if not self._queue:
                await self._wake.wait()
            self._wake = trio.Event()
            self.flush_now()
            await conn.wait_pending_below(self.HIGH_WATER)

    def _relay_message(self, batches: list[_Batch]) -> bytes:
        relays = [
            Relay(request_id=b.request_id, frames=b.frames, last_seq=b.last_seq, terminal=b.terminal) for b in batches
        ]
        return codec.encode(relays[0] if len(relays) == 1 else RelayBatch(relays=relays))

    def flush_now(self, everything: bool = False) -> None:
        """Send control messages at once, then events while the link has room (all of
        them if `everything`), without waiting for the outbox task (a request that just
        ended should not wait a scheduler turn). What the kernel cannot take yet waits
        in the link, in order."""
        conn = self._conn
        if conn is None:
            return
        if self._urgent:
            urgent, self._urgent = self._urgent, []
            for data in urgent:
                conn.send(data)
        queue = self._queue
        taken = 0
        sent_bytes = 0
        while taken < len(queue) and (everything or conn.pending < self.HIGH_WATER):
            run: list[_Batch] = []
            size = 0
            while taken < len(queue) and (not run or size + queue[taken].size <= self.BATCH_BYTES):
                run.append(queue[taken])
                size += queue[taken].size
                taken += 1
            conn.send(self._relay_message(run))
            sent_bytes += size
        if taken:
            del queue[:taken]
            self._bytes -= sent_bytes
            if self._bytes <= self.HIGH_WATER and not self._room.is_set():
                self._room.set()
        if queue:
            self._wake.set()  # the rest goes once the link has room

    async def flush(self) -> None:
        """Everything queued, out of this process (before it exits)."""
        self.flush_now(everything=True)
        if self._conn is not None:
            await self._conn.wait_pending_below(1)


class JobRunner:
    """Runs jobs for one adapter: retries, deadlines, cancellation, events."""

    def __init__(self, adapter: Adapter, outbox: Outbox, toolids: ToolIdMap, rng: random.Random | None = None) -> None:
        self.adapter = adapter
        self.outbox = outbox
        self.toolids = toolids
        self.rng = rng or random.Random()
        self.scopes: dict[str, trio.CancelScope] = {}
        #: Jobs the supervisor cancelled, until their end reads it (their scope's
        #: cancel is then not the request's deadline).
        self.cancelled: dict[str, bool] = {}
        self.calls: dict[str, Call] = {}  # the current attempt of each job
        self.received_ns: dict[str, int] = {}  # when each job arrived (TRUNKLINE_TRACE_HOPS only)
        self.peak = 0  # the most jobs at once since `take_peak`
        self.started = 0  # jobs started since `take_peak`
        #: Set once `TRIM_JOBS` jobs have started since `take_peak`.
        self.many_started = trio.Event()
        #: Send `llm.call_started` and `llm.call_completed` (`CallEvents`): nobody reads
        #: them while no client watches the bus and no span counts attempts.
        self.call_events = True
        self._idle = trio.Event()
        self._idle.set()

    async def wait_idle(self) -> None:
        """Until no job is running."""
        while self.scopes:
            await self._idle.wait()

    def take_peak(self) -> int:
        """The most jobs that ran at once since the last call."""
        peak, self.peak = self.peak, len(self.scopes)
        self.started = 0
        if self.many_started.is_set():
            self.many_started = trio.Event()
        return peak

    def cancel(self, request_id: str) -> bool:
        scope = self.scopes.get(request_id)
        if scope is None:
            return False
        self.cancelled[request_id] = True  # not its deadline: the job ends as cancelled
        scope.cancel()
        return True

    def _wire_ids(self, job: Job) -> dict[str, str]:
        """The provider id for every tool call in the history (and its results)."""
        session = job.request.session_id
        out: dict[str, str] = {}
        for message in job.request.messages:
            for part in message.content:
                if type(part) is ToolCallPart:
                    known = part.provider_id if part.provider == self.adapter.name else None
                    out[part.id] = self.toolids.provider_id_for(part.id, session, self.adapter.make_tool_id, known)
                    if part.provider_id:
                        out.setdefault(part.provider_id, out[part.id])
                elif type(part) is ToolResultPart and part.tool_call_id not in out:
                    out[part.tool_call_id] = self.toolids.provider_id_for(
                        part.tool_call_id, session, self.adapter.make_tool_id
                    )
            if message.role == "tool" and message.tool_call_id and message.tool_call_id not in out:
                out[message.tool_call_id] = self.toolids.provider_id_for(
                    message.tool_call_id, session, self.adapter.make_tool_id
                )
        return out

    def _canonical(self, job: Job) -> Callable[[str], str]:
        session = job.request.session_id
        counter = iter(range(1_000_000))

        def canonical_id(provider_id: str) -> str:
            # Some servers give no id at all: mint one so results can still answer the call.
            return self.toolids.canonical_for(provider_id or f"call_{job.request_id}_{next(counter)}", session)

        return canonical_id

    def _info(self, err: ProviderError, note: str = "") -> ErrorInfo:
        info = err.to_info(self.adapter.name, self.adapter.secrets)
        if note:
            info.message = f"{info.message} ({note})"
        return info

    def report_progress(self) -> None:
        """For each whole-response job whose gathered content grew since the last report,
        tell the supervisor what it holds now (a worker that dies mid-answer then loses
        none of what the provider already sent, and billed)."""
        for call in self.calls.values():
            acc = call.gathered
            if acc is None or call.job.stream or call.gathered_events == call.reported_events:
                continue
            call.reported_events = call.gathered_events
            self.outbox.push(Progress(request_id=call.job.request_id, content=acc.content(), model=acc.model))

    async def run(self, job: Job) -> None:
        """Run one job to its terminal event. Whatever goes wrong inside fails this job
        alone (class `other`, one log line naming it), never the worker and its other jobs."""
        emitter = Emitter(
            job,
            self.adapter.name,
            self.outbox.push_frames,
            self._canonical(job),
            max_event_bytes=max_event_bytes(self.adapter.max_response_bytes),
        )
        try:
            await self._run(job, emitter)
        except Exception as exc:
            log.error(
                "request %s: the worker failed on it: %s",
                job.request_id,
                redact(f"{type(exc).__name__}: {exc}", self.adapter.secrets)[:300],
            )
            log.debug("request %s: traceback", job.request_id, exc_info=True)
            self.scopes.pop(job.request_id, None)
            self.calls.pop(job.request_id, None)
            self.cancelled.pop(job.request_id, None)
            if not self.scopes:
                self._idle.set()
            emitter.fail(
                ErrorInfo(
                    error_class="other",
                    provider=self.adapter.name,
                    message=f"the {self.adapter.name} worker failed on this request "
                    f"({type(exc).__name__}); other requests are unaffected",
                )
            )
            self.outbox.flush_now()

    async def _run(self, job: Job, emitter: Emitter) -> None:
        deadlines = Deadlines.resolve(reloaded(job.timeouts, TimeoutPolicy) or self.adapter.timeouts, job)
        # One scope for the supervisor's cancel and the request's deadline (a second,
        # nested one cost every job 6-10 µs); `cancel` notes which of the two it was.
        if not deadlines.request_s >= 0:  # as trio's `move_on_after` (NaN included): validation should have caught it
            raise ValueError(
                f"the request's deadline must be a non-negative number of seconds, not {deadlines.request_s}"
            )
        call: Call | None = None
        try:
            with trio.CancelScope(deadline=trio.current_time() + deadlines.request_s) as scope:
                self.scopes[job.request_id] = scope
                if len(self.scopes) > self.peak:
                    self.peak = len(self.scopes)
                self.started += 1
                if self.started == TRIM_JOBS:
                    self.many_started.set()
                if self._idle.is_set():
                    self._idle = trio.Event()
                try:
                    await self._attempts(job, emitter, deadlines)
                finally:
                    self.scopes.pop(job.request_id, None)
                    self.received_ns.pop(job.request_id, None)
                    call = self.calls.pop(job.request_id, None)
                    if not self.scopes:
                        self._idle.set()
        finally:
            # The last attempt's connection, kept until its terminal event was out: handed
            # back here, outside the job's scope (a cancel that comes after the reply must
            # not read as the job's), whichever way the job ended.
            if call is not None and call.deferred is not None:
                await call.settle()
        asked = self.cancelled.pop(job.request_id, False) if self.cancelled else False
        if scope.cancelled_caught and not asked:
            emitter.fail(
                ErrorInfo(
                    error_class="timeout",
                    message=f"request exceeded its {deadlines.request_s:g}s deadline",
                    retryable=True,
                    provider=self.adapter.name,
                )
            )
            return
        if scope.cancelled_caught or not emitter.terminal:
            emitter.cancelled()
            self.outbox.bus(
                "llm.call_cancelled",
                request_id=job.request_id,
                provider=self.adapter.name,
                model=job.model.id,
                operation_id=job.operation_id,
                detail="upstream closed" if call is None or not call.upstream_open else "upstream still open",
            )

    async def _attempts(self, job: Job, emitter: Emitter, deadlines: Deadlines) -> None:
        adapter = self.adapter
        policy: RetryPolicy = reloaded(job.retry, RetryPolicy) or adapter.retry
        deadline = trio.current_time() + deadlines.request_s
        try:
            options = adapter.read_options(job.request)  # once per job: every attempt reads these
        except ProviderError as err:
            emitter.fail(self._info(err))
            return
        emitter.service_tier = provider_options.service_tier(options)
        keys = adapter.keys
        key = job.key_index
        problem = keys.problem(key)
        if problem is not None:
            emitter.fail(self._info(problem))
            return
        tried: set[int] = set()  # keys this job moved away from
        if keys.several and keys.resting(key):
            # Rested here since the supervisor chose it (a 429 it had not heard of yet).
            other = keys.another(key, tried)
            key = key if other is None else other
        wire_ids = self._wire_ids(job)
        retries = 0
        attempt = 0
        common = {
            "request_id": job.request_id,
            "provider": adapter.name,
            "model": job.model.id,
            "operation_id": job.operation_id,
        }
        while True:
            # The call shares the emitter's warning list, so what the request translator
            # notes is in `stream_start` and in the final response.
            attempt += 1
            call = Call(
                job,
                adapter.name,
                attempt,
                job.operation_id,
                deadlines,
                wire_ids,
                warnings=emitter.warnings,
                backlog=self.outbox if job.stream else None,
                options=options,
                key_index=key,
                defer_close=True,
            )
            self.calls[job.request_id] = call
            if self.call_events:
                self.outbox.bus(
                    "llm.call_started",
                    attempt_id=call.attempt_id,
                    attempt=call.attempt,
                    detail=f"key {keys.names[key]}" if keys.several else None,
                    **common,
                )
            started_ns = trace.now_ns() if trace.ENABLED else 0
            try:
                if job.stream:
                    skeleton = await adapter.stream(call, emitter.emit)
                    replied_ns = trace.now_ns() if trace.ENABLED else 0
                    emitter.rate_limit = call.rate_limit
                    emitter.finish(skeleton)
                else:
                    response = await adapter.complete(call)
                    replied_ns = trace.now_ns() if trace.ENABLED else 0
                    emitter.rate_limit = call.rate_limit
                    emitter.complete(response)
                if trace.ENABLED:
                    self.outbox.bus(
                        "trace.worker",
                        request_id=job.request_id,
                        detail=trace.detail(
                            {
                                "job_received": self.received_ns.pop(job.request_id, 0),
                                "attempt_started": started_ns,
                                "reply_done": replied_ns,
                                "terminal_emitted": emitter.terminal_ns or trace.now_ns(),
                            }
                        ),
                    )
                if self.call_events:
                    self.outbox.bus(
                        "llm.call_completed",
                        attempt_id=call.attempt_id,
                        attempt=call.attempt,
                        retry_count=retries,
                        latency_ms=emitter.acc.finished.latency_ms if emitter.acc.finished else None,
                        usage=emitter.acc.finished.usage if emitter.acc.finished else None,
                        **common,
                    )
                self.outbox.flush_now()
                return
            except ProviderError as err:
                error = err
            except trio.Cancelled:
                raise
            except Exception as exc:  # a response the translator could not read
                log.error(
                    "request %s: provider %s: unexpected failure: %s",
                    job.request_id,
                    adapter.name,
                    redact(f"{type(exc).__name__}: {exc}", adapter.secrets)[:300],
                )
                log.debug("request %s: traceback", job.request_id, exc_info=True)
                error = ProviderError("invalid_response", f"could not read the provider's response: {exc!r}")
            emitter.rate_limit = call.rate_limit or emitter.rate_limit
            if call.answered:
                error.sent = True  # the provider began to answer: this attempt may be billed
            if error.gathered is None and call.gathered is not None:
                error.gathered = call.gathered.content() or None
            # Output already received was billed: a retry would bill it again, whatever the class.
            error.output = emitter.started or bool(error.gathered)
            self.outbox.bus(
                "llm.call_failed",
                attempt_id=call.attempt_id,
                attempt=call.attempt,
                error_class=error.error_class,
                retry_count=retries,
                detail=redact(error.message, adapter.secrets),
                **common,
            )
            if emitter.started:
                emitter.fail(
                    self._info(error, "the stream had already begun, so it was not retried" if error.retryable else "")
                )
                return
            if keys.failed(key, error):
                # Before the job's end reaches the supervisor, so its next job gets another key.
                self.outbox.push(
                    KeyFailed(key_index=key, error_class=error.error_class, retry_after_s=error.retry_after)
                )
                tried.add(key)
                other = keys.another(key, tried)
                if other is not None and not error.output:
                    # A 429, 401 or 403 produced nothing to bill: the next key at once beats
                    # waiting out this one's Retry-After (and is no retry of the same call).
                    self.outbox.bus(
                        "llm.retrying",
                        wait_s=0.0,
                        error_class=error.error_class,
                        attempt=call.attempt + 1,
                        retry_count=retries,
                        detail=f"with key {keys.names[other]}: {keys.names[key]} rests",
                        **common,
                    )
                    key = other
                    await call.settle()  # a response read through, then refused: its connection goes back
                    continue
            decision = decide(
                error,
                retries,
                policy,
                max_retries=job.request.max_retries,
                time_left_s=deadline - trio.current_time(),
                rng=self.rng,
            )
            if not decision.retry:
                note = decision.reason if error.retryable else ""
                emitter.fail(self._info(error, note), error.gathered)
                return
            if decision.from_retry_after:
                self.outbox.bus(
                    "llm.rate_limited",
                    wait_s=decision.wait_s,
                    error_class=error.error_class,
                    attempt=call.attempt,
                    **common,
                )
            self.outbox.bus(
                "llm.retrying",
                wait_s=decision.wait_s,
                error_class=error.error_class,
                attempt=call.attempt + 1,
                retry_count=retries + 1,
                **common,
            )
            await call.settle()  # not held through the backoff
            await trio.sleep(decision.wait_s)
            retries += 1


_P = TypeVar("_P", RetryPolicy, TimeoutPolicy)


def reloaded(raw: dict[str, Any] | None, kind: type[_P]) -> _P | None:
    """A policy the supervisor sent with a job after `trunkline reload` changed it."""
    return msgspec.convert(raw, kind) if raw else None


#: Provider type -> "module:class" of its adapter (imported only by the worker that needs it).
ADAPTERS = {
    "mock": "mock.adapter:MockAdapter",
    "anthropic": "anthropic.adapter:AnthropicAdapter",
    "openai": "openai.adapter:OpenAIAdapter",
    "openai_compat": "openai_compat.adapter:OpenAICompatAdapter",
    "ollama": "ollama.adapter:OllamaAdapter",
    "gemini": "gemini.adapter:GeminiAdapter",
}


def adapter_class(kind: str) -> type[Adapter]:
    import importlib

    if kind not in ADAPTERS:
        raise ValueError(f"no worker for provider type {kind!r}")
    module, _, cls = ADAPTERS[kind].partition(":")
    found: type[Adapter] = getattr(importlib.import_module(f"{__package__}.{module}"), cls)
    return found


def load_adapter(settings: WorkerSettings) -> Adapter:
    kind = settings.provider.type
    adapter: Adapter = adapter_class(kind)(settings.name, settings.provider, settings.retry, settings.timeouts)
    adapter.max_response_bytes = settings.max_response_bytes
    return adapter


async def trim_pool(adapter: Adapter, runner: JobRunner) -> None:
    """Every `TRIM_INTERVAL_S`, or every `TRIM_JOBS` jobs if sooner, close the idle
    connections beyond the most jobs that ran at once over the last two periods. The
    connections a burst opened would otherwise stay pooled for the keep-alive time and
    cost every later request (`HttpAdapter.trim_idle`)."""
    previous = 0
    while True:
        with trio.move_on_after(TRIM_INTERVAL_S):
            await runner.many_started.wait()
        current = runner.take_peak()
        await adapter.trim_idle(max(previous, current))
        previous = current


async def serve(settings: WorkerSettings) -> None:
    """The worker's main loop, until `shutdown` or the supervisor goes away."""
    adapter = load_adapter(settings)
    toolids = ToolIdMap(Path(settings.state_dir) / f"toolids-{settings.name}.sqlite3")
    outbox = Outbox()
    runner = JobRunner(adapter, outbox, toolids)
    sock = link.inherited(settings.link)
    parent = settings.supervisor_pid or os.getppid()
    try:
        async with trio.open_nursery() as nursery:
            conn = link.conn(sock, nursery)
            adapter.jobs_running = lambda: len(runner.scopes)
            nursery.start_soon(outbox.run, conn)
            outbox.push(WorkerUp(provider=settings.name, pid=os.getpid(), generation=settings.generation))

            unreachable: list[str | None] = [None]

            async def probe() -> None:
                while True:
                    unreachable[0] = await adapter.probe()
                    outbox.push(Heartbeat(in_flight=len(runner.scopes), unreachable=unreachable[0]))
                    await trio.sleep(PROBE_INTERVAL_S)

            async def heartbeat() -> None:
                while True:
                    await trio.sleep(settings.heartbeat_interval_s)
                    if os.getppid() != parent:
                        log.warning("supervisor is gone; worker %s exits", settings.name)
                        os._exit(0)
                    outbox.push(Heartbeat(in_flight=len(runner.scopes), unreachable=unreachable[0]))
                    runner.report_progress()

            nursery.start_soon(probe)
            nursery.start_soon(heartbeat)
            nursery.start_soon(trim_pool, adapter, runner)
            jobs_nursery = nursery
            while True:
                try:
                    messages = await conn.receive()
                except Closed:
                    # The supervisor has gone (or given up on us): nobody can take our events.
                    log.warning("the link to the supervisor closed; worker %s exits", settings.name)
                    nursery.cancel_scope.cancel()
                    break
                for data in messages:
                    msg = codec.decode_to_worker(data)
                    if type(msg) is Job:
                        if msg.generation != settings.generation:
                            continue  # queued for a worker that died before taking it
                        if trace.ENABLED:
                            runner.received_ns[msg.request_id] = trace.now_ns()
                        jobs_nursery.start_soon(runner.run, msg)
                    elif type(msg) is StopJob:
                        runner.cancel(msg.request_id)
                    elif type(msg) is CallEvents:
                        runner.call_events = msg.send
                    elif type(msg) is CheckReady:
                        nursery.start_soon(_answer_ready, adapter, outbox, msg)
                    elif type(msg) is EstimateTokens:
                        nursery.start_soon(_answer_count, adapter, outbox, msg)
                    elif type(msg) is Shutdown:
                        await _drain(runner, msg.grace_s)
                        await outbox.flush()
                        nursery.cancel_scope.cancel()
                        return
    finally:
        await adapter.aclose()
        toolids.close()
        sock.close()


async def _drain(runner: JobRunner, grace_s: float) -> None:
    with trio.move_on_after(grace_s):
        await runner.wait_idle()
    for request_id in list(runner.scopes):
        runner.cancel(request_id)
    with trio.move_on_after(2.0):
        await runner.wait_idle()


async def _answer_ready(adapter: Adapter, outbox: Outbox, msg: CheckReady) -> None:
    try:
        await adapter.ready(msg.model)
        outbox.push(CallResult(call_id=msg.call_id))
    except ProviderError as err:
        outbox.push(CallResult(call_id=msg.call_id, ok=False, error=err.to_info(adapter.name, adapter.secrets)))
    except Exception as exc:  # noqa: BLE001 - answer, never die on one request
        outbox.push(CallResult(call_id=msg.call_id, ok=False, error=ErrorInfo(error_class="other", message=repr(exc))))


#: How long a provider's own token count may take before the estimate answers instead
#: (the supervisor waits 10 s for the answer).
EXACT_COUNT_S = 8.0


async def _answer_count(adapter: Adapter, outbox: Outbox, msg: EstimateTokens) -> None:
    exact: int | None = None
    with trio.move_on_after(EXACT_COUNT_S):
        try:
            exact = await adapter.count_tokens_exact(msg.request, msg.model)
        except ProviderError as err:
            log.info(
                "provider %s could not count tokens (%s); estimating",
                adapter.name,
                redact(err.message, adapter.secrets),
            )
        except Exception:
            log.exception("provider %s: token count failed; estimating", adapter.name)
    if exact is not None:
        outbox.push(CallResult(call_id=msg.call_id, input_tokens=exact, exact=True))
        return
    try:
        count = adapter.count_tokens(msg.request, msg.model)
        outbox.push(CallResult(call_id=msg.call_id, input_tokens=count))
    except Exception as exc:  # noqa: BLE001 - answer, never die on one request
        outbox.push(CallResult(call_id=msg.call_id, ok=False, error=ErrorInfo(error_class="other", message=repr(exc))))


#: Built at import, so msgspec's type information for the settings is built in the fork
#: server and shared: decoding them with a decoder made in each worker left about 0.9 MiB
#: of private pages in every forked worker.
_SETTINGS = msgspec.json.Decoder(WorkerSettings)


def main() -> None:
    """Entry point of `python -m trunkline.workers`; settings come in TRUNKLINE_WORKER."""
    # The supervisor owns our lifetime: Ctrl-C is its to handle, and if it dies we die with it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # SIGHUP and SIGTERM at their defaults, whatever the daemon inherited (`nohup` ignores
    # SIGHUP): once running, the supervisor handles both, so a worker it spawns gets them at
    # default through exec; the fork server started before those handlers, and its workers
    # kept what the daemon was given. Both ways of starting now end in the same state.
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raw = os.environ.get("TRUNKLINE_WORKER")
    if not raw:
        raise SystemExit("trunkline worker: TRUNKLINE_WORKER is not set (workers are started by `trunkline serve`)")
    settings = _SETTINGS.decode(raw)
    if settings.supervisor_pid and os.getppid() != settings.supervisor_pid:
        raise SystemExit("trunkline worker: the supervisor that started this worker is gone")
    logging.basicConfig(
        level=settings.log_level.upper(), format=f"%(asctime)s worker[{settings.name}] %(levelname)s %(message)s"
    )
    if settings.log_level != "debug":
        # httpx logs every request at INFO: a line per call is noise at this level, and costs CPU.
        logging.getLogger("httpx").setLevel(logging.WARNING)
    trio.run(serve, settings)
