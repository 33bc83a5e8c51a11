"""Requests the supervisor knows about: who asked, who serves, what was published.

Each request keeps a ring of its most recent event frames so a client that
lost some (PUB/SUB drops for slow subscribers) can ask for them again: at most
`ring_events` of them and `ring_bytes` bytes (always its last frame, whatever
its size), so an endless stream costs the supervisor a bounded amount; the
ring outlives the request for `keep_s`, and outlives its worker: a crashed
worker's requests still answer `replay`. Finished requests' rings share one
byte budget (`max_bytes`): under heavy load the oldest are let go first, while
the request itself is still remembered (a repeated submit is still recognised)
for `keep_s`, up to `max_requests`. A ring let go keeps its terminal frame: the
finish or error carries the whole response, which the provider may have billed,
so `replay` answers with it (and its `first_seq` tells the client which deltas
it must do without). Those terminal frames count against the same budget: past
it the oldest go too (the newest always stays), and `replay` of such a request
says `unknown`.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Any

from ..config.catalog import compute_cost
from ..protocol.accumulate import StreamAccumulator
from ..protocol.codec import decode_event, decode_to_worker, split_frame
from ..protocol.messages import Job, ModelInfo, Progress, Response, Usage
from ..protocol.tokens import estimate_content_tokens, estimate_request_tokens

if TYPE_CHECKING:
    from .terminal import Summary


class RequestState:
    __slots__ = (
        "admission",
        "attempts",
        "cancel_deadline",
        "client_id",
        "ended",
        "ended_at",
        "evicted",
        "first_event",
        "generation",
        "job",
        "job_bytes",
        "last_seq",
        "model",
        "operation_id",
        "otel_attrs",
        "otel_chunks",
        "owner",
        "progress",
        "provider",
        "request_id",
        "resolved",
        "ring",
        "ring_bytes",
        "route",
        "size",
        "span",
        "stream",
        "submitted_at",
        "summary",
        "trace",
    )

    def __init__(
        self,
        request_id: str,
        client_id: str,
        provider: str,
        model: str,
        stream: bool,
        operation_id: str,
        ring_events: int,
        now: float,
        *,
        owner: int = 0,
        size: int = 0,
    ) -> None:
        self.request_id = request_id
        self.client_id = client_id
        self.provider = provider
        self.model = model
        self.stream = stream
        self.operation_id = operation_id
        self.generation: int | None = None  # the worker incarnation it was sent to
        self.ring: deque[bytes] = deque(maxlen=ring_events)
        self.last_seq = -1
        self.ended = False
        self.ended_at = 0.0
        self.cancel_deadline: float | None = None
        self.submitted_at = now
        self.trace: dict[str, int] | None = None  # TRUNKLINE_TRACE_HOPS only
        self.ring_bytes = 0  # the frames' bytes (with FRAME_OVERHEAD each once it has ended)
        self.evicted = False  # its ring was let go to keep within the budget
        #: The control connection it came on and its submit's size, counted against
        #: that connection's limits while it runs.
        self.owner = owner
        self.size = size
        #: A whole-response job's content so far, as its worker last reported it.
        self.progress: Progress | None = None
        self.first_event = False  # a worker's first frame for it has been relayed (for metrics)
        # OpenTelemetry (supervisor/telemetry.py), while it is on: the open span, the
        # attributes every metric of the request carries, the attempts seen, a
        # stream's chunk times (StreamTimes) while its metrics are on.
        self.span: Any = None
        self.otel_attrs: dict[str, Any] | None = None
        self.attempts = 0
        self.otel_chunks: Any = None
        #: What goes to the worker, until it has gone; then only its encoded bytes
        #: are kept (a decoded request costs several times its size), read again only
        #: to estimate the bill of a partial the supervisor reports itself (a dead worker).
        self.job: Job | None = None
        self.job_bytes: bytes | None = None
        #: The catalog entry it was resolved to.
        self.resolved: ModelInfo | None = None
        #: Its terminal event as read at its end (`supervisor.terminal.summary_of`).
        self.summary: Summary | None = None
        #: A route's request: its deployment now, those left, those tried
        #: (`admission.routes.RouteRun`); None for a model named directly.
        self.route: Any = None
        #: What admission counted for it (`admission.gate.Held`), to settle at its end;
        #: None when no limit or client key applies.
        self.admission: Any = None

    @property
    def first_seq(self) -> int:
        return self.last_seq - len(self.ring) + 1

    def sent(self, data: bytes) -> None:
        """Its job went to the worker as `data`: keep the bytes, not the objects."""
        self.job_bytes = data
        self.job = None

    def sent_job(self) -> Job | None:
        """The job as the worker got it (None before it was sent)."""
        if self.job is not None:
            return self.job
        if self.job_bytes is None:
            return None
        job = decode_to_worker(self.job_bytes)
        return job if type(job) is Job else None

    def keep(self, frames: list[bytes], max_bytes: int) -> None:
        """Add frames to the ring, the oldest going first past its count or `max_bytes`
        (the newest frame always stays, whatever its size)."""
        ring = self.ring
        limit = ring.maxlen
        assert limit is not None  # every ring is made with one
        size = self.ring_bytes + sum(map(len, frames))
        overflow = len(ring) + len(frames) - limit
        for _ in range(min(overflow, len(ring))):
            size -= len(ring.popleft())
        ring.extend(frames)
        while size > max_bytes and len(ring) > 1:
            size -= len(ring.popleft())
        self.ring_bytes = size

    def frames_from(self, from_seq: int, limit: int) -> list[bytes]:
        start = max(from_seq - self.first_seq, 0)
        end = min(start + limit, len(self.ring))
        if start == 0 and end == len(self.ring):
            return list(self.ring)
        return [self.ring[i] for i in range(start, end)]

    def accumulator(self) -> StreamAccumulator:
        """What its published events tell (for a request the supervisor must end itself)."""
        acc = StreamAccumulator(self.provider)
        for frame in self.ring:
            _, body = split_frame(frame)
            acc.feed(decode_event(body))
        return acc


def estimate_billing(state: RequestState, partial: Response, now: float) -> None:
    """Usage, cost and latency for a partial response the supervisor reports itself (its
    worker died mid-stream), as a worker does for a stream cut short: the provider billed
    the prompt and what it generated, so both are estimated (the prompt from the request,
    the output from what was relayed) and flagged `estimated`, never left at zero."""
    job = state.sent_job()
    prompt = estimate_request_tokens(job.request) if job is not None else 0
    output = estimate_content_tokens(list(partial.message.content))
    partial.usage = Usage(input_tokens=prompt, output_tokens=output, total_tokens=prompt + output, estimated=True)
    if job is not None:
        partial.cost_usd = compute_cost(partial.usage, job.model.price)
        partial.pricing_version = job.model.pricing_version if partial.cost_usd is not None else None
        partial.model = partial.model or job.model.wire_name
    partial.id = partial.id or state.request_id
    partial.latency_ms = round((now - state.submitted_at) * 1000.0, 3)


#: The model of a request, in metrics, when the catalog does not list it: the name is
#: whatever the client wrote, and each would make series of its own.
OTHER_MODEL = "other"

#: What Python spends on each kept frame beyond its bytes (object header, ring slot).
FRAME_OVERHEAD = 56


class RequestTable:
    def __init__(
        self, ring_events: int, keep_s: float, max_ended: int, max_bytes: int = 64 << 20, ring_bytes: int = 16 << 20
    ) -> None:
        self.ring_events = ring_events
        self.ring_bytes = ring_bytes
        self.keep_s = keep_s
        self.max_ended = max_ended
        self.max_bytes = max_bytes
        self.active: dict[str, RequestState] = {}
        self.ended: OrderedDict[str, RequestState] = OrderedDict()
        self.ended_bytes = 0  # the rings of ended requests
        self._rings: deque[RequestState] = deque()  # ended requests that still hold a ring, oldest first
        self._terminals: deque[RequestState] = deque()  # ... that hold only their terminal frame
        #: Per control connection: [requests running, their submits' bytes].
        self.load: dict[int, list[int]] = {}
        #: The running requests of each provider, so a status or a worker's death costs
        #: what that provider runs, not what the daemon runs.
        self._of_provider: dict[str, dict[str, RequestState]] = {}

    def get(self, request_id: str) -> RequestState | None:
        return self.active.get(request_id) or self.ended.get(request_id)

    def load_of(self, owner: int) -> tuple[int, int]:
        """(requests, submit bytes) the connection `owner` has running."""
        load = self.load.get(owner)
        return (load[0], load[1]) if load is not None else (0, 0)

    def add(self, state: RequestState) -> None:
        self.active[state.request_id] = state
        running = self._of_provider.get(state.provider)
        if running is None:
            running = self._of_provider[state.provider] = {}
        running[state.request_id] = state
        load = self.load.setdefault(state.owner, [0, 0])
        load[0] += 1
        load[1] += state.size

    def discard(self, state: RequestState) -> None:
        """Forget a request that never ran (its submit failed after it was added)."""
        if self.active.pop(state.request_id, None) is not None:
            self._unload(state)

    def move(self, state: RequestState, provider: str) -> None:
        """A running request now served by another provider (a route's fallback)."""
        running = self._of_provider.get(state.provider)
        if running is not None:
            running.pop(state.request_id, None)
        state.provider = provider
        running = self._of_provider.get(provider)
        if running is None:
            running = self._of_provider[provider] = {}
        running[state.request_id] = state

    def _unload(self, state: RequestState) -> None:
        del self._of_provider[state.provider][state.request_id]
        load = self.load.get(state.owner)
        if load is not None:
            load[0] -= 1
            load[1] -= state.size
            if load[0] <= 0:
                del self.load[state.owner]

    def end(self, state: RequestState, now: float) -> None:
        state.ended = True
        state.ended_at = now
        state.job = state.job_bytes = None  # the prompt may be large: not kept for replay
        if self.active.pop(state.request_id, None) is not None:
            self._unload(state)
        self.ended[state.request_id] = state
        state.ring_bytes = sum(map(len, state.ring)) + FRAME_OVERHEAD * len(state.ring)
        self.ended_bytes += state.ring_bytes
        self._rings.append(state)
        while len(self.ended) > self.max_ended:
            self._forget(self.ended.popitem(last=False)[1])
        rings, terminals = self._rings, self._terminals
        while rings and (rings[0].evicted or self.ended_bytes > self.max_bytes):
            oldest = rings.popleft()
            if not oldest.evicted:
                self._evict(oldest)
                terminals.append(oldest)
        # Terminal frames count too: past the budget the oldest go whole (the newest
        # always stays), or a flood of large responses would be kept for `keep_s`.
        while len(terminals) > 1 and (not terminals[0].ring or self.ended_bytes > self.max_bytes):
            self._forget(terminals.popleft())

    def _evict(self, state: RequestState) -> None:
        """Let its ring go but for the terminal frame."""
        if state.evicted:
            return
        state.evicted = True
        terminal = state.ring[-1] if state.ring else None
        state.ring.clear()
        self.ended_bytes -= state.ring_bytes
        state.ring_bytes = 0
        if terminal is not None:
            state.ring.append(terminal)
            state.ring_bytes = len(terminal) + FRAME_OVERHEAD
            self.ended_bytes += state.ring_bytes

    def _forget(self, state: RequestState) -> None:
        """Let everything of it go (its `keep_s` has passed, or too many are kept)."""
        state.evicted = True
        state.ring.clear()
        self.ended_bytes -= state.ring_bytes
        state.ring_bytes = 0

    def expire(self, now: float) -> int:
        dropped = 0
        while self.ended:
            request_id, state = next(iter(self.ended.items()))
            if now - state.ended_at < self.keep_s:
                break
            del self.ended[request_id]
            self._forget(state)
            dropped += 1
        while self._rings and self._rings[0].evicted:
            self._rings.popleft()
        while self._terminals and not self._terminals[0].ring:
            self._terminals.popleft()
        return dropped

    def of_client(self, client_id: str) -> list[RequestState]:
        """The client's running requests (a copy: the caller may end them)."""
        return [s for s in self.active.values() if s.client_id == client_id]

    def of_provider(self, provider: str) -> list[RequestState]:
        """The provider's running requests (a copy: the caller may end them)."""
        running = self._of_provider.get(provider)
        return list(running.values()) if running else []

    def count_of(self, provider: str) -> int:
        """How many requests the provider runs."""
        running = self._of_provider.get(provider)
        return len(running) if running else 0
