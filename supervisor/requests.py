"""Requests the supervisor knows about: who asked, who serves, what was published.

Each request keeps a ring of its most recent event frames so a client that
lost some (PUB/SUB drops for slow subscribers) can ask for them again; the
ring outlives the request for `keep_s`, and outlives its worker: a crashed
worker's requests still answer `replay`. Finished requests' rings share one
byte budget (`max_bytes`): under heavy load the oldest are let go first, while
the request itself is still remembered (a repeated submit is still recognised)
for `keep_s`, up to `max_requests`. A ring let go keeps its terminal frame: the
finish or error carries the whole response, which the provider may have billed,
so `replay` can always answer with it (and its `first_seq` tells the client
which deltas it must do without).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterator
from typing import Any

from ..config.catalog import compute_cost
from ..protocol.accumulate import StreamAccumulator
from ..protocol.codec import decode_event, split_frame
from ..protocol.messages import Job, Progress, Response, Usage
from ..protocol.tokens import estimate_content_tokens, estimate_request_tokens


class RequestState:
    __slots__ = (
        "request_id", "client_id", "provider", "model", "stream", "operation_id",
        "generation", "ring", "last_seq", "ended", "ended_at", "cancel_deadline", "submitted_at", "trace",
        "ring_bytes", "evicted", "job", "progress", "first_event", "span", "otel_attrs", "attempts", "otel_chunks",
    )

    def __init__(self, request_id: str, client_id: str, provider: str, model: str, stream: bool,
                 operation_id: str, ring_events: int, now: float) -> None:
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
        self.ring_bytes = 0  # counted once it has ended
        self.evicted = False  # its ring was let go to keep within the budget
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
        #: What was sent to the worker, while it runs: a partial the supervisor must
        #: report itself (the worker died) is estimated from its prompt and model.
        self.job: Job | None = None

    @property
    def first_seq(self) -> int:
        return self.last_seq - len(self.ring) + 1

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
    job = state.job
    prompt = estimate_request_tokens(job.request) if job is not None else 0
    output = estimate_content_tokens(partial.message.content)  # type: ignore[arg-type]
    partial.usage = Usage(input_tokens=prompt, output_tokens=output, total_tokens=prompt + output, estimated=True)
    if job is not None:
        partial.cost_usd = compute_cost(partial.usage, job.model.price)
        partial.pricing_version = job.model.pricing_version if partial.cost_usd is not None else None
        partial.model = partial.model or job.model.wire_name
    partial.id = partial.id or state.request_id
    partial.latency_ms = round((now - state.submitted_at) * 1000.0, 3)


#: What Python spends on each kept frame beyond its bytes (object header, ring slot).
FRAME_OVERHEAD = 56


class RequestTable:
    def __init__(self, ring_events: int, keep_s: float, max_ended: int, max_bytes: int = 64 << 20) -> None:
        self.ring_events = ring_events
        self.keep_s = keep_s
        self.max_ended = max_ended
        self.max_bytes = max_bytes
        self.active: dict[str, RequestState] = {}
        self.ended: OrderedDict[str, RequestState] = OrderedDict()
        self.ended_bytes = 0  # the rings of ended requests
        self._rings: deque[RequestState] = deque()  # ended requests that still hold a ring, oldest first

    def get(self, request_id: str) -> RequestState | None:
        return self.active.get(request_id) or self.ended.get(request_id)

    def add(self, state: RequestState) -> None:
        self.active[state.request_id] = state

    def end(self, state: RequestState, now: float) -> None:
        state.ended = True
        state.ended_at = now
        state.job = None  # the prompt may be large: not kept for replay
        self.active.pop(state.request_id, None)
        self.ended[state.request_id] = state
        state.ring_bytes = sum(map(len, state.ring)) + FRAME_OVERHEAD * len(state.ring)
        self.ended_bytes += state.ring_bytes
        self._rings.append(state)
        while len(self.ended) > self.max_ended:
            self._forget(self.ended.popitem(last=False)[1])
        rings = self._rings
        while rings and (rings[0].evicted or self.ended_bytes > self.max_bytes):
            self._evict(rings.popleft())

    def _evict(self, state: RequestState) -> None:
        """Let its ring go but for the terminal frame (a state left in `_rings` is
        skipped over when reached)."""
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
        return dropped

    def of_client(self, client_id: str) -> Iterator[RequestState]:
        return (s for s in list(self.active.values()) if s.client_id == client_id)

    def of_provider(self, provider: str) -> Iterator[RequestState]:
        return (s for s in list(self.active.values()) if s.provider == provider)
