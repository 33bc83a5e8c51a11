"""The daemon's event socket (Pub0) stood in for by a list: what would have gone out."""

from __future__ import annotations

from typing import Any

from trunkline.protocol import codec
from trunkline.protocol.codec import split_frame


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
