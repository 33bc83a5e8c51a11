"""Canonical request -> the mock's wire plan (a list of chunks to play back).

`provider_options.mock` scripts a reply as a list of steps, or a conversation
as `turns` (a list of step lists: the one played is chosen by how many
assistant turns the history already holds, so a tool loop runs offline);
without either the mock echoes the last user message word by word. Chunks are plain dicts with a
`kind`, the mock's own "wire format", so the stream and response translators
work on it the way real providers' translators work on SSE or JSON.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from ...protocol import provider_options
from ...protocol.messages import ProviderPart, Request, WarningInfo
from ...protocol.provider_options import MockOptions, Step, UsageStep
from ...protocol.tokens import estimate_request_tokens, estimate_text_tokens
from .._provider_parts import keep_provider_part
from ..errors import ProviderError

#: `ProviderPart.api` of the mock; it takes back no provider's opaque parts.
API = "mock"


_WORDS = re.compile(r"\s*\S+\s*|\s+")


def options(request: Request, provider: str) -> MockOptions:
    raw = request.provider_options.get(provider) or request.provider_options.get("mock") or {}
    try:
        checked = provider_options.check("mock", raw, "provider_options.mock")
    except provider_options.OptionsError as exc:
        raise ProviderError("invalid_request", str(exc)) from None
    assert isinstance(checked, MockOptions)
    return checked


def _last_user_text(request: Request) -> str:
    for message in reversed(request.messages):
        if message.role == "user":
            return message.text
    return ""


def _echo(request: Request, opts: MockOptions) -> Iterator[Step]:
    """The last user message word by word, made as it is played: a long prompt must not
    hold the worker's loop while all of its words are cut up at once."""
    text = _last_user_text(request) or "(nothing to echo)"
    finish = "stop"
    matched: str | None = None
    for stop in request.stop_sequences:
        at = text.find(stop)
        if stop and at >= 0:
            text, matched = text[:at], stop
    used, end = 0, 0
    for word in _WORDS.finditer(text):
        if request.max_tokens is not None:
            used += estimate_text_tokens(word.group().strip()) or 1
            if used > request.max_tokens:
                finish = "length"
                break
        end = word.end()
        yield Step(text=word.group(), delay=opts.delay or None)
    out_tokens = estimate_text_tokens(text[:end])
    yield Step(usage=UsageStep(input_tokens=estimate_request_tokens(request), output_tokens=out_tokens))
    yield Step(finish=finish if matched is None else f"stop_sequence:{matched}")


def _fragments(arguments: dict[str, Any] | str, n: int) -> list[str]:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments, separators=(",", ":"))
    if not raw:
        return [""]
    n = max(1, min(n, len(raw)))
    size = -(-len(raw) // n)
    return [raw[i : i + size] for i in range(0, len(raw), size)]


def build(request: Request, provider: str, model_wire_name: str) -> Iterator[dict[str, Any]]:
    """The chunks the mock will play for `request`, made as they are played (the
    options are checked at once)."""
    opts = options(request, provider)
    return _chunks(request, opts, model_wire_name)


def _chunks(request: Request, opts: MockOptions, model_wire_name: str) -> Iterator[dict[str, Any]]:
    scripted = _scripted(request, opts)
    steps: Iterable[Step] = scripted if scripted is not None else _echo(request, opts)
    yield {"kind": "start", "model": opts.model or model_wire_name}
    tool_number = 0
    for _ in range(max(opts.repeat, 1)):
        for step in steps:
            if step.delay:
                yield {"kind": "delay", "seconds": step.delay}
            if step.text is not None:
                yield {"kind": "text", "text": step.text}
            if step.reasoning is not None:
                yield {"kind": "reasoning", "text": step.reasoning}
            if step.signature is not None:
                yield {"kind": "signature", "signature": step.signature}
            if step.redacted is not None:
                yield {"kind": "redacted", "data": step.redacted}
            if step.tool_call is not None:
                tool_number += 1
                call = step.tool_call
                call_id = call.id or f"mockcall_{tool_number}"
                yield {"kind": "tool_start", "id": call_id, "name": call.name}
                for fragment in _fragments(call.arguments, call.chunks):
                    if call.fragment_delay:
                        yield {"kind": "delay", "seconds": call.fragment_delay}
                    yield {"kind": "tool_args", "id": call_id, "json": fragment}
                if call.hold:
                    yield {"kind": "delay", "seconds": call.hold}
                yield {"kind": "tool_end", "id": call_id}
            if step.event is not None:
                yield {"kind": "event", "data": step.event}
            if step.usage is not None:
                yield {"kind": "usage", **msgspec.to_builtins(step.usage)}
            if step.error is not None:
                yield {"kind": "error", **msgspec.to_builtins(step.error)}
            if step.finish is not None:
                yield {"kind": "finish", "reason": step.finish}
            if step.stall:
                yield {"kind": "stall"}
            if step.crash:
                yield {"kind": "crash"}
        if scripted is None:
            break


def _scripted(request: Request, opts: MockOptions) -> list[Step] | None:
    if opts.turns is None:
        return opts.steps
    done = sum(1 for m in request.messages if m.role == "assistant")
    if done >= len(opts.turns):
        raise ProviderError(
            "invalid_request",
            (
                f"provider_options.mock.turns scripts {len(opts.turns)} turn(s) and the history already holds "
                f"{done} assistant turn(s): no turn is left to play"
            ),
        )
    return opts.turns[done]


def history_warnings(request: Request, model_wire_name: str) -> list[WarningInfo]:
    """What a real translator would say of the history: the mock sends none of it,
    but a conversation moved here from a provider should hear the same warnings."""
    warnings: list[WarningInfo] = []
    for message in request.messages:
        for part in message.content:
            if isinstance(part, ProviderPart):
                keep_provider_part(part, API, model_wire_name, warnings)
    return warnings
