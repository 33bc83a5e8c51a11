"""Gemini `generateContent` body -> canonical Response. Pure.

A whole response is one chunk of a stream, so it goes through the stream
translator and the same accumulator clients use: the two paths cannot
disagree about parts, signatures, finish reasons or usage.
"""

from __future__ import annotations

from typing import Any

from ...protocol.accumulate import StreamAccumulator
from ...protocol.messages import Message, Response
from .stream import GeminiStream


def parse(body: Any, model: str = "", include_raw: bool = False) -> Response:
    translator = GeminiStream(model)
    acc = StreamAccumulator()
    for event in translator.feed(body):
        acc.feed(event)
    closing, skeleton = translator.finish(streamed=False)
    for event in closing:
        acc.feed(event)
    skeleton.message = Message(role="assistant", content=acc.content())
    skeleton.raw = body if include_raw else None
    return skeleton
