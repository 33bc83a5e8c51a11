"""Canonical request -> what the mock plays (its body). Pure.

`provider_options.mock` scripts a reply as a list of steps, or a conversation
as `turns` (a list of step lists: the one played is chosen by how many
assistant turns the history already holds, so a tool loop runs offline);
without either the mock echoes the last user message word by word. The body
holds the script, or an `Echo`; the playback (`playback.py`, the mock's server)
turns it into the chunks of the mock's wire format (`wire.py`), which the
stream translator reads the way real providers' translators read SSE.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...protocol.messages import ModelInfo, ProviderPart, Request, WarningInfo
from ...protocol.provider_options import MockOptions, Step
from ...protocol.tokens import estimate_request_tokens
from .._contract import Built, options_as
from .._provider_parts import keep_provider_part
from ..errors import ProviderError
from .wire import Echo

#: `ProviderPart.api` of the mock; it takes back no provider's opaque parts.
API = "mock"


def build(
    request: Request,
    model: ModelInfo,
    *,
    provider: str = API,
    options: MockOptions | None = None,
    wire_ids: Mapping[str, str] | None = None,
    stream: bool = True,
    instance: Mapping[str, Any] | None = None,
) -> Built:
    """The body the mock plays for `request`: `model`, and the `steps` to play `repeat`
    times, or the `echo`. The mock sends nothing anywhere, so `wire_ids`, `stream` and
    `instance` change nothing; the history's provider parts are warned about as a real
    translator would."""
    opts = options_as(MockOptions, options, request, provider, API)
    body: dict[str, Any] = {"model": opts.model or model.wire_name, "repeat": opts.repeat}
    script = _scripted(request, opts)
    if script is not None:
        body["steps"] = script
    else:
        body["echo"] = _echo(request, opts)
    return Built(body, warnings=history_warnings(request, model.wire_name))


def _echo(request: Request, opts: MockOptions) -> Echo:
    """The last user message, cut at the first stop sequence it holds (the last one
    listed that matches, as the text shrinks)."""
    text = next((m.text for m in reversed(request.messages) if m.role == "user"), "") or "(nothing to echo)"
    matched: str | None = None
    for stop in request.stop_sequences:
        at = text.find(stop)
        if stop and at >= 0:
            text, matched = text[:at], stop
    return Echo(
        text=text,
        stop=matched,
        max_tokens=request.max_tokens,
        delay=opts.delay,
        input_tokens=estimate_request_tokens(request),
    )


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
