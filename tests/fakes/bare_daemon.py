"""A real `Daemon` without sockets, as the supervisor's tests drive it: its event socket
(Pub0) stood in for by a list of what would have gone out, and requests put in its table
as if accepted."""

from __future__ import annotations

from typing import Any

import trio

from trunkline.protocol import codec
from trunkline.protocol.codec import split_frame
from trunkline.protocol.messages import Job, Message, ModelInfo, Request
from trunkline.supervisor.daemon import Daemon
from trunkline.supervisor.requests import RequestState


class Published:
    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def publish(self, frame: bytes) -> None:
        self.frames.append(frame)

    def publish_many(self, frames: list[bytes]) -> None:
        self.frames.extend(frames)

    def events(self, client_id: str = "c1") -> list[Any]:
        """The events published on `client_id`'s topic, decoded."""
        out = []
        for frame in self.frames:
            topic, body = split_frame(frame)
            if topic == client_id:
                out.extend(codec.decode_events(body))
        return out


def running(d: Daemon, request_id: str, *, stream: bool = True) -> RequestState:
    """A `mock:echo` request of client `c1`, accepted and running on the mock worker."""
    state = RequestState(request_id, "c1", "mock", "mock:echo", stream, request_id, 100, trio.current_time())
    state.generation = 1
    state.job = Job(
        request_id=request_id,
        client_id="c1",
        stream=stream,
        operation_id=request_id,
        request=Request(model="mock:echo", messages=[Message.user("hi")]),
        model=ModelInfo(id="mock:echo", provider="mock", wire_name="echo"),
    )
    d.requests.add(state)
    return state
