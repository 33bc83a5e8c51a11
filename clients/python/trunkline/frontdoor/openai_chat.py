"""POST /v1/chat/completions: OpenAI's Chat Completions, through the canonical form.

The request side is `openai_chat_request.py`; this module answers, whole or streamed:

* the message: `content` (null beside tool calls when there is no text), `tool_calls`
  (the canonical ids, `type: function`, the arguments as the model wrote them), the
  reasoning as `reasoning_content` (LiteLLM's field; the API itself has none), and a
  refusal (finish `content_filter` raised by the model's own refusal) as `refusal`;
* `finish_reason`: `stop`, `length`, `tool_calls` (whenever the answer calls a tool),
  `content_filter`; a cancelled, failed or unexplained end is `stop`;
* `usage` with `prompt_tokens_details.cached_tokens` (and `cache_write_tokens` when
  the provider wrote to its cache) and `completion_tokens_details.reasoning_tokens`;
  prompt and completion counts include them, as OpenAI's do;
* a stream is a role chunk, content (and `reasoning_content`) deltas, tool-call deltas
  (the first of a call with its `index`, `id`, `type` and name and empty arguments,
  then argument fragments), a finish chunk with an empty delta, then with
  `stream_options.include_usage` a chunk with no choices and the usage (every chunk
  before it has `usage: null`), then `[DONE]`. An error after the stream began is a
  `data: {"error": ...}` event, then `[DONE]`.

A streamed refusal has gone out as content before its finish says it was one, so
only a whole answer moves it to `refusal`.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from ..protocol.ids import ulid
from ..protocol.messages import (
    ErrorInfo,
    Finish,
    ReasoningDelta,
    Response,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
    ThinkingPart,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallPart,
    ToolCallStart,
    Usage,
)
from . import sse
from .app import Headers, Parsed
from .errors import Family, body_of
from .openai_chat_request import parse_body

_encode = msgspec.json.encode

#: Canonical finish reasons OpenAI has a word for; the rest (cancelled, error, other) end as `stop`.
_FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_calls", "content_filter": "content_filter"}


def finish_reason(reason: str, called: bool) -> str:
    """OpenAI's `finish_reason`: `tool_calls` whenever the answer calls a tool (a provider
    may say it stopped), else the canonical reason's word."""
    if called and reason in ("stop", "tool_calls", "other"):
        return "tool_calls"
    return _FINISH.get(reason, "stop")


def usage_of(usage: Usage) -> dict[str, Any]:
    prompt_details: dict[str, int] = {"cached_tokens": usage.cache_read_tokens}
    if usage.cache_write_tokens:
        prompt_details["cache_write_tokens"] = usage.cache_write_tokens
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens or usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": prompt_details,
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def tool_call_of(part: ToolCallPart) -> dict[str, Any]:
    arguments = part.raw_arguments if part.arguments is None else None
    if not arguments:
        arguments = _encode(part.arguments or {}).decode()
    return {"id": part.id, "type": "function", "function": {"name": part.name, "arguments": arguments}}


def message_of(response: Response) -> dict[str, Any]:
    """The answer as Chat Completions' `choices[0].message`."""
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for part in response.message.content:
        if isinstance(part, ToolCallPart):
            calls.append(tool_call_of(part))
        elif isinstance(part, ThinkingPart):
            reasoning.append(part.text)
        elif isinstance(part, TextPart):
            texts.append(part.text)
    text = "".join(texts)
    message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else ""), "refusal": None}
    finish = response.finish_reason
    if finish.reason == "content_filter" and finish.raw == "refusal" and text:
        message["content"], message["refusal"] = None, text
    if calls:
        message["tool_calls"] = calls
    if any(reasoning):
        message["reasoning_content"] = "".join(reasoning)
    return message


class ChatCompletions:
    family: Family = "openai"

    def parse(self, body: Any, headers: Headers) -> Parsed:
        request, chat = parse_body(body)
        include_usage = bool(chat.stream_options and chat.stream_options.include_usage)
        return Parsed(request, bool(chat.stream), chat.model, {"include_usage": include_usage})

    def whole(self, response: Response, parsed: Parsed) -> Any:
        message = message_of(response)
        return {
            "id": f"chatcmpl-{response.id or ulid()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": parsed.model,
            "system_fingerprint": None,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": finish_reason(response.finish_reason.reason, "tool_calls" in message),
                    "logprobs": None,
                }
            ],
            "usage": usage_of(response.usage),
        }

    def streamer(self, parsed: Parsed) -> ChatStream:
        return ChatStream(parsed.model, f"chatcmpl-{ulid()}", int(time.time()), parsed.extra["include_usage"])


class ChatStream:
    """Canonical events -> `chat.completion.chunk` events. Every chunk shares its id,
    time and model, so each is the same bytes around its delta: those are made once,
    and an event costs the encoding of its delta."""

    def __init__(self, model: str, id: str, created: int, include_usage: bool) -> None:
        self.include_usage = include_usage
        created_and_model = b',"object":"chat.completion.chunk","created":' + str(created).encode() + b',"model":'
        self._top = b'data: {"id":' + _encode(id) + created_and_model + _encode(model) + b',"system_fingerprint":null'
        usage = b',"usage":null' if include_usage else b""
        self._head = self._top + b',"choices":[{"index":0,"delta":'
        self._tail = b',"logprobs":null,"finish_reason":null}]' + usage + b"}\n\n"
        self._finish_tail = b',"logprobs":null,"finish_reason":"%s"}]' + usage + b"}\n\n"
        #: Each tool call's content index -> [its position among the calls, whether arguments went out].
        self._calls: dict[int, list[Any]] = {}

    def _chunk(self, delta: bytes) -> bytes:
        return self._head + delta + self._tail

    def events(self, event: StreamEvent) -> list[bytes]:
        if isinstance(event, TextDelta):
            if not event.text:
                return []
            return [self._head + b'{"content":' + _encode(event.text) + b"}" + self._tail]
        if isinstance(event, ToolCallDelta):
            call = self._calls.get(event.index)
            if call is None or not event.partial_json:
                return []
            call[1] = True
            return [self._arguments(call[0], event.partial_json)]
        if isinstance(event, ReasoningDelta):
            if not event.text:
                return []
            return [self._head + b'{"reasoning_content":' + _encode(event.text) + b"}" + self._tail]
        if isinstance(event, StreamStart):
            return [self._chunk(b'{"role":"assistant","content":"","refusal":null}')]
        if isinstance(event, ToolCallStart):
            position = len(self._calls)
            self._calls[event.index] = [position, False]
            delta = {
                "tool_calls": [
                    {
                        "index": position,
                        "id": event.id,
                        "type": "function",
                        "function": {"name": event.name, "arguments": ""},
                    }
                ]
            }
            return [self._chunk(_encode(delta))]
        if isinstance(event, ToolCallEnd):
            call = self._calls.get(event.index)
            if call is None or call[1]:
                return []
            # No fragment came (a provider that gives a call whole, a call without arguments):
            # the arguments go out at once, `{}` for none, as OpenAI sends them.
            arguments = event.raw_arguments if event.arguments is None else ""
            return [self._arguments(call[0], arguments or _encode(event.arguments or {}).decode())]
        if isinstance(event, Finish):
            return self._finish(event.response)
        return []

    def _arguments(self, position: int, fragment: str) -> bytes:
        return self._chunk(
            b'{"tool_calls":[{"index":%d,"function":{"arguments":' % position + _encode(fragment) + b"}}]}"
        )

    def _finish(self, response: Response) -> list[bytes]:
        reason = finish_reason(response.finish_reason.reason, bool(self._calls))
        out = [self._head + b"{}" + self._finish_tail % reason.encode()]
        if self.include_usage:
            out.append(self._top + b',"choices":[],"usage":' + _encode(usage_of(response.usage)) + b"}\n\n")
        return out

    def error(self, info: ErrorInfo, status: int) -> list[bytes]:
        return [sse.event(None, body_of(info, "openai", status))]

    def end(self) -> list[bytes]:
        return [sse.DONE]
