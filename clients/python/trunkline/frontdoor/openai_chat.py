"""POST /v1/chat/completions: OpenAI's Chat Completions, through the canonical form.

(The first cut: text conversations, whole and streamed. Tools, content parts,
response formats and the rest are to come.)"""

from __future__ import annotations

import time
from typing import Any

from ..protocol.ids import ulid
from ..protocol.messages import (
    ErrorInfo,
    Finish,
    Message,
    Request,
    Response,
    StreamEvent,
    TextDelta,
    TextPart,
)
from . import sse
from .app import Headers, Parsed
from .errors import Family, body_of, refuse

_FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_calls", "content_filter": "content_filter"}


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise refuse(f"{where}[{i}]: only text parts are taken for now", param=f"{where}[{i}]")
            out.append(part["text"])
        return "".join(out)
    raise refuse(f"{where} must be a string or a list of parts", param=where)


class ChatCompletions:
    family: Family = "openai"

    def parse(self, body: Any, headers: Headers) -> Parsed:
        if not isinstance(body, dict):
            raise refuse("the request body must be a JSON object")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise refuse("`model` is required", param="model")
        raw_messages = body.get("messages")
        if not isinstance(raw_messages, list) or not raw_messages:
            raise refuse("`messages` must be a non-empty array", param="messages")
        messages = []
        for i, m in enumerate(raw_messages):
            if not isinstance(m, dict) or m.get("role") not in ("system", "developer", "user", "assistant"):
                raise refuse(f"messages[{i}]: unknown role", param=f"messages[{i}].role")
            messages.append(
                Message(role=m["role"], content=[TextPart(text=_text(m.get("content"), f"messages[{i}].content"))])
            )
        request = Request(model=model, messages=messages)
        options = body.get("provider_options")  # trunkline's own field (an SDK's extra_body)
        if options is not None:
            if not isinstance(options, dict) or not all(isinstance(v, dict) for v in options.values()):
                raise refuse("`provider_options` maps a provider to its options", param="provider_options")
            request.provider_options = options
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        if max_tokens is not None:
            request.max_tokens = max_tokens
        for name in ("temperature", "top_p", "seed"):
            if body.get(name) is not None:
                setattr(request, name, body[name])
        options = body.get("stream_options") or {}
        return Parsed(
            request,
            bool(body.get("stream")),
            model,
            {"include_usage": bool(options.get("include_usage")) if isinstance(options, dict) else False},
        )

    def whole(self, response: Response, parsed: Parsed) -> Any:
        usage = response.usage
        return {
            "id": f"chatcmpl-{response.id or ulid()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": parsed.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": response.text},
                    "finish_reason": _FINISH.get(response.finish_reason.reason, "stop"),
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": usage.input_tokens,
                "completion_tokens": usage.output_tokens,
                "total_tokens": usage.input_tokens + usage.output_tokens,
            },
        }

    def streamer(self, parsed: Parsed) -> ChatStream:
        return ChatStream(parsed)


class ChatStream:
    def __init__(self, parsed: Parsed) -> None:
        self.parsed = parsed
        self.id = f"chatcmpl-{ulid()}"
        self.created = int(time.time())
        self.began = False

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse.event(
            None,
            {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.parsed.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            },
        )

    def events(self, event: StreamEvent) -> list[bytes]:
        out = []
        if not self.began:
            self.began = True
            out.append(self._chunk({"role": "assistant", "content": ""}))
        if isinstance(event, TextDelta):
            out.append(self._chunk({"content": event.text}))
        elif isinstance(event, Finish):
            out.append(self._chunk({}, _FINISH.get(event.response.finish_reason.reason, "stop")))
        return out

    def error(self, info: ErrorInfo, status: int) -> list[bytes]:
        return [sse.event(None, body_of(info, "openai", status))]

    def end(self) -> list[bytes]:
        return [sse.DONE]
