"""Each request's events, in `seq` order, for the task waiting for them.

The connection's one reader task hands every event to its request's `Route`,
in whatever order they arrived; the route keeps the early ones until the gap
before them is filled (by the subscription, or by `replay`) and hands them on
in order.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Protocol

import anyio

from .protocol.messages import BusEvent, ErrorEvent, ErrorInfo, Finish, StreamEvent


class Wake(Protocol):
    """What a route's consumer waits on: `anyio.Event`, or the loop's own event."""

    def set(self) -> None: ...

    async def wait(self) -> None: ...


class Route:
    """Where one request's events go, in order, whatever order they arrive in."""

    def __init__(
        self,
        request_id: str,
        routes: dict[str, Route],
        on_gap: Callable[[Route], None],
        new_event: Callable[[], Wake] = anyio.Event,
    ) -> None:
        self.request_id = request_id
        self._routes = routes  # the connection's table, which this route leaves once it is done
        self._on_gap = on_gap
        self.next_seq = 0
        self.pending: dict[int, StreamEvent] = {}
        # A deque and an event rather than a memory channel: a request is short-lived,
        # and creating and draining a channel per request cost more than the rest of
        # the client's work for a small one.
        self.queue: deque[StreamEvent] = deque()
        self.wake: Wake | None = None
        #: The loop's own event class (trio's inside trio: anyio's wrapper costs five times as much).
        self._new_event = new_event
        self.waiting_since = 0.0  # time.monotonic() when its consumer began to wait; 0: not waiting
        self.done = False
        self.recovering = False
        self.lost = 0  # events that could not be recovered (deltas only; the terminal is complete)
        self.recovered = 0  # events that came by replay because the subscription missed them
        #: Called (in the reader, so it must not block) with each bus event about this
        #: request while the route is open, when the connection listens to the bus.
        self.on_bus: Callable[[BusEvent], None] | None = None

    def deliver(self, ev: StreamEvent) -> None:
        seq = ev.seq
        if self.done or seq < self.next_seq:
            return
        if seq > self.next_seq:
            self.pending[seq] = ev
            self._on_gap(self)
            return
        self._push(ev)
        while self.next_seq in self.pending:
            self._push(self.pending.pop(self.next_seq))

    def _push(self, ev: StreamEvent) -> None:
        self.next_seq = ev.seq + 1
        self.queue.append(ev)
        if isinstance(ev, (Finish, ErrorEvent)):
            self.done = True
            self.pending.clear()
            # Nothing more can arrive for it: the consumer holds the route itself.
            if self._routes.get(self.request_id) is self:
                del self._routes[self.request_id]
        if self.wake is not None:
            self.wake.set()

    def skip_to(self, seq: int) -> None:
        """Events before `seq` are gone for good (the replay ring moved on)."""
        if seq > self.next_seq:
            self.lost += seq - self.next_seq
            self.next_seq = seq
            while self.next_seq in self.pending:
                self._push(self.pending.pop(self.next_seq))

    def fail(self, info: ErrorInfo) -> None:
        if not self.done:
            self._push(ErrorEvent(request_id=self.request_id, seq=self.next_seq, error=info))

    async def next_event(self) -> StreamEvent | None:
        """The request's next event in order; None once its terminal event was taken."""
        queue = self.queue
        while True:
            if queue:
                return queue.popleft()
            if self.done:
                return None
            self.wake = wake = self._new_event()
            self.waiting_since = time.monotonic()  # the connection's silence check looks at it
            try:
                await wake.wait()
            finally:
                self.wake = None
                self.waiting_since = 0.0

    def ready(self) -> list[StreamEvent]:
        """The events that have already arrived, in order, taken without waiting (the
        front door writes them in one go: one socket write for a burst, not one each)."""
        queue = self.queue
        taken = list(queue)
        queue.clear()
        return taken

    async def events(self) -> AsyncIterator[StreamEvent]:
        """Every event still to come, the terminal one last."""
        while (ev := await self.next_event()) is not None:
            yield ev
