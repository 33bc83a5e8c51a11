"""Gemini `generateContent` body -> canonical Response. Pure.

A whole response is one chunk of a stream, so it goes through the stream
translator and the same accumulator clients use: the two paths cannot
disagree about parts, signatures, finish reasons or usage. A long generation
(Gemini's long decode) is several bodies, one per continuation; `Collector`
joins them into one response.
"""

from __future__ import annotations

from typing import Any

from ...protocol.accumulate import StreamAccumulator
from ...protocol.messages import Message, Response
from .stream import GeminiStream


class Collector:
    def __init__(self, model: str = "") -> None:
        self.translator = GeminiStream(model)
        self._acc = StreamAccumulator()
        self._raw: list[Any] = []

    def feed(self, body: Any, follow: bool = True) -> str | None:
        """Take one body; the continuation token when the model is not done (and `follow`)."""
        self._raw.append(body)
        for event in self.translator.feed_payload(body):
            self._acc.feed(event)
        return self.translator.take_continuation() if follow else None

    def result(self, include_raw: bool = False) -> Response:
        ending = self.translator.finish(streamed=False)
        for event in ending.events:
            self._acc.feed(event)
        skeleton = ending.response
        skeleton.message = Message(role="assistant", content=self._acc.content())
        if include_raw:
            skeleton.raw = self._raw[0] if len(self._raw) == 1 else self._raw
        return skeleton


def parse(body: Any, model: str = "", include_raw: bool = False) -> Response:
    collector = Collector(model)
    collector.feed(body)
    return collector.result(include_raw)
