"""Canonical request -> Chat Completions body. Pure.

System and developer messages become one leading `system` message; tool
results become `role: tool` messages (an error result is prefixed `ERROR: `,
as the format has no error flag); reasoning from any provider is dropped with
a warning, as Chat Completions has no way to send it back.

For a catalog model the model's rules apply (workers/_rules.py): sampling
parameters it does not take are left out with a warning, a reasoning model
gets `max_completion_tokens` even where the instance asks for the legacy
`max_tokens` (reasoning models refuse it), and function tools go only to a
model that takes them over Chat Completions (rule `chat_completions_tools`).
Other providers' opaque parts (`provider_part`) are left out with a warning too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...protocol import provider_options
from ...protocol.messages import (
    AudioPart,
    DocumentPart,
    ImagePart,
    Message,
    ModelInfo,
    ProviderPart,
    RedactedThinkingPart,
    Request,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    WarningInfo,
)
from .. import _rules
from .._contract import Built
from .._provider_parts import keep_provider_part
from .._warnings import warn
from ..errors import ProviderError

#: `ProviderPart.api` of this wire format; no provider's opaque part can be sent over it.
API = "openai_chat"
PROVIDER_TYPE = "openai_compat"

#: Instance options (the `options:` of a provider in the config) this module reads.
#:   legacy_max_tokens: send `max_tokens` instead of `max_completion_tokens`
#:   stream_usage: ask for usage on streams (`stream_options.include_usage`; default true)
#:   reasoning_effort: send `reasoning_effort` for reasoning models (default true)
#:   max_stop_sequences: the most stop sequences the server takes; the first ones are
#:     sent, with a warning (default: 4 for OpenAI's own hosts, else no limit)


def image_url(part: ImagePart) -> dict[str, Any]:
    url = part.url if part.data is None else f"data:{part.media_type};base64,{part.data}"
    inner: dict[str, Any] = {"url": url}
    if part.detail:
        inner["detail"] = part.detail
    return {"type": "image_url", "image_url": inner}


def error_text(part: ToolResultPart) -> str:
    text = (
        part.content
        if isinstance(part.content, str)
        else "".join(p.text for p in part.content if isinstance(p, TextPart))
    )
    return f"ERROR: {text}" if part.is_error else text


class _Translator:
    def __init__(self, wire_ids: Mapping[str, str], warnings: list[WarningInfo], wire_model: str = "") -> None:
        self.wire_ids = wire_ids
        self.warnings = warnings
        self.wire_model = wire_model

    def user(self, message: Message) -> dict[str, Any]:
        parts: list[dict[str, Any]] = []
        for part in message.content:
            if isinstance(part, TextPart):
                parts.append({"type": "text", "text": part.text})
            elif isinstance(part, ImagePart):
                parts.append(image_url(part))
            elif isinstance(part, (AudioPart, DocumentPart)):
                kind = "audio" if isinstance(part, AudioPart) else "document"
                warn(
                    self.warnings,
                    "unsupported_content",
                    f"this OpenAI-compatible provider is sent text and images only; a {kind} part was dropped",
                )
        if all(p["type"] == "text" for p in parts):
            return {"role": "user", "content": "".join(p["text"] for p in parts)}
        return {"role": "user", "content": parts}

    def assistant(self, message: Message) -> dict[str, Any]:
        text: list[str] = []
        calls: list[dict[str, Any]] = []
        for part in message.content:
            if isinstance(part, TextPart):
                text.append(part.text)
            elif isinstance(part, ToolCallPart):
                arguments = (
                    part.raw_arguments
                    if part.arguments is None and part.raw_arguments
                    else json.dumps(part.arguments or {}, ensure_ascii=False)
                )
                calls.append(
                    {
                        "id": self.wire_ids.get(part.id, part.id),
                        "type": "function",
                        "function": {"name": part.name, "arguments": arguments},
                    }
                )
            elif isinstance(part, (ThinkingPart, RedactedThinkingPart)):
                warn(
                    self.warnings, "thinking_dropped", "Chat Completions cannot carry earlier reasoning; it was dropped"
                )
            elif isinstance(part, ProviderPart):
                keep_provider_part(part, API, self.wire_model, self.warnings)  # never kept: it warns
        out: dict[str, Any] = {"role": "assistant", "content": "".join(text) if text else None}
        if calls:
            out["tool_calls"] = calls
        return out

    def tool(self, message: Message) -> list[dict[str, Any]]:
        results = [p for p in message.content if isinstance(p, ToolResultPart)]
        if not results and message.tool_call_id:
            return [
                {
                    "role": "tool",
                    "tool_call_id": self.wire_ids.get(message.tool_call_id, message.tool_call_id),
                    "content": message.text,
                }
            ]
        out = []
        for result in results:
            if not isinstance(result.content, str) and any(isinstance(p, ImagePart) for p in result.content):
                warn(self.warnings, "unsupported_content", "tool results are sent as text; an image was dropped")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": self.wire_ids.get(result.tool_call_id, result.tool_call_id),
                    "content": error_text(result),
                }
            )
        return out


def _stop_sequences(stops: list[str], limit: Any, warnings: list[WarningInfo]) -> list[str]:
    """At most `limit` of them: a server that takes fewer refuses the whole request."""
    if not isinstance(limit, int) or isinstance(limit, bool) or len(stops) <= limit:
        return list(stops)
    warn(
        warnings,
        "unsupported_setting",
        f"this server takes at most {limit} stop sequences; the first {limit} of {len(stops)} were sent",
    )
    return list(stops[:limit])


def _check_tools(request: Request, model: ModelInfo) -> None:
    """Refuse function tools a model does not take over Chat Completions, before the call."""
    rule = model.rules.chat_completions_tools
    if rule == "no":
        raise ProviderError(
            "invalid_request",
            f"{model.id} takes no function tools over Chat Completions "
            "(rule `chat_completions_tools`); use the Responses API for tools",
        )
    if rule == "no_reasoning" and _rules.effective_effort(request, model) not in (None, "none"):
        raise ProviderError(
            "invalid_request",
            f"{model.id} takes function tools over Chat Completions only with "
            "reasoning_effort none (rule `chat_completions_tools`)",
        )


def build(
    request: Request,
    model: ModelInfo,
    *,
    provider: str = PROVIDER_TYPE,
    options: Mapping[str, Any] | None = None,
    wire_ids: Mapping[str, str] | None = None,
    stream: bool = True,
    instance: Mapping[str, Any] | None = None,
) -> Built:
    """`options`: a server's options are forwarded whole, so they stay the mapping they are."""
    warnings: list[WarningInfo] = []
    if options is None:
        options = provider_options.entry(request.provider_options, provider, PROVIDER_TYPE)[1]
    instance = instance or {}
    t = _Translator(wire_ids or {}, warnings, model.wire_name)
    messages: list[dict[str, Any]] = []
    system = "\n\n".join(m.text for m in request.messages if m.role in ("system", "developer") and m.text)
    if system:
        messages.append({"role": "system", "content": system})
    for message in request.messages:
        if message.role == "user":
            messages.append(t.user(message))
        elif message.role == "assistant":
            entry = t.assistant(message)
            if entry["content"] is not None or "tool_calls" in entry:
                messages.append(entry)  # one left with nothing (only dropped parts) would be refused
        elif message.role == "tool":
            messages.extend(t.tool(message))
    body: dict[str, Any] = {"model": model.wire_name, "messages": messages}
    choice = request.tool_choice
    if request.tools:
        body["tools"] = []
        for tool in request.tools:
            function: dict[str, Any] = {"name": tool.name, "parameters": tool.parameters}
            if tool.description:
                function["description"] = tool.description
            if tool.strict is not None:
                function["strict"] = tool.strict
            body["tools"].append({"type": "function", "function": function})
        if choice is not None:
            body["tool_choice"] = (
                {"type": "function", "function": {"name": choice.name}} if choice.mode == "tool" else choice.mode
            )
    if request.tools:
        _check_tools(request, model)
    if request.max_tokens is not None:
        legacy = bool(instance.get("legacy_max_tokens"))
        # A model with a documented effort ladder is a provider's reasoning model (OpenAI's
        # refuse `max_tokens`); a local server's reasoning model keeps what the instance asks.
        if legacy and model.reasoning and model.rules.efforts is not None:
            legacy = False
            warn(
                warnings,
                "unsupported_setting",
                f"{model.id} is a reasoning model, which refuses the legacy "
                "max_tokens; max_completion_tokens was sent instead",
            )
        body["max_tokens" if legacy else "max_completion_tokens"] = request.max_tokens
    if request.stop_sequences:
        body["stop"] = _stop_sequences(request.stop_sequences, instance.get("max_stop_sequences"), warnings)
    body.update(_rules.sampling({"temperature": request.temperature, "top_p": request.top_p}, request, model, warnings))
    if request.seed is not None:
        body["seed"] = request.seed
    fmt = request.response_format
    if fmt is not None and fmt.kind == "json_schema":
        schema: dict[str, Any] = {"name": fmt.name or "response", "schema": fmt.schema}
        if fmt.strict is not None:
            schema["strict"] = fmt.strict
        body["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif fmt is not None and fmt.kind == "json_object":
        body["response_format"] = {"type": "json_object"}
    if request.reasoning_effort is not None and instance.get("reasoning_effort", True):
        if model.reasoning:
            body["reasoning_effort"] = request.reasoning_effort
        else:
            warn(warnings, "reasoning_unsupported", f"{model.id} is not a reasoning model; reasoning_effort ignored")
    if stream:
        body["stream"] = True
        if instance.get("stream_usage", True):
            body["stream_options"] = {"include_usage": True}
    if request.metadata.get("user_id"):
        body["user"] = request.metadata["user_id"]
    unknown = provider_options.unknown_keys(PROVIDER_TYPE, options)
    if unknown:
        # Servers have extensions of their own, so these go as asked, but not silently.
        warn(
            warnings,
            "unknown_option",
            f"provider_options.{provider}: {', '.join(sorted(unknown))} "
            "forwarded as given (not a Chat Completions field or a known server extension); put a field "
            "in extra_body to send it without this warning",
        )
    body.update(provider_options.body_fields(options))
    return Built(body, warnings=warnings)
