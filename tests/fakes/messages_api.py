"""Whole answers of a fake Anthropic Messages API and a fake Chat Completions server,
for tests that need an upstream to answer a plain text."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fakes.upstream import Recorded, Reply


def anthropic_answer(text: str) -> Callable[[Recorded], Reply]:
    """A Messages API answer with `text`, streamed or whole as the request asks."""

    def reply(request: Recorded) -> Reply:
        usage = {"input_tokens": 5, "output_tokens": 2}
        if not (request.json() or {}).get("stream"):
            message = {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "usage": usage,
            }
            return Reply.json(message)

        def event(kind: str, data: dict[str, Any]) -> str:
            return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

        start = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": []}
        return Reply.sse(
            event("message_start", {"message": {**start, "stop_reason": None, "usage": usage}})
            + event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
            + event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text}})
            + event("content_block_stop", {"index": 0})
            + event("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": usage})
            + event("message_stop", {})
        )

    return reply


def compat_answer(text: str) -> Reply:
    return Reply.json(
        {
            "id": "c1",
            "object": "chat.completion",
            "model": "my-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        }
    )
