"""Canonical request -> Ollama /api/chat body. Pure.

Tool calls carry their arguments as an object and tool results name their
tool (`tool_name`), not an id; images travel as bare base64. What Ollama
cannot do is said in a warning, never faked: it cannot force a tool
(`required` or a named tool) and cannot fetch images by URL.

`think` is a level ("low", "medium", "high") for models that take levels
(gpt-oss, or a catalog entry whose `rules.efforts` lists them) and a boolean
for the rest.
"""

from __future__ import annotations

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
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    WarningInfo,
)
from ...protocol.provider_options import OllamaOptions
from .._contract import Built, options_as
from .._provider_parts import keep_provider_part
from .._warnings import warn
from ..openai_compat.request import error_text

#: `ProviderPart.api` of Ollama's native chat; no provider's opaque part can be sent to it.
API = "ollama"


def _names_of_calls(messages: list[Message]) -> dict[str, str]:
    return {p.id: p.name for m in messages for p in m.content if isinstance(p, ToolCallPart)} | {
        p.provider_id: p.name for m in messages for p in m.content if isinstance(p, ToolCallPart) and p.provider_id
    }


def _images(parts: list[Any], warnings: list[WarningInfo]) -> list[str]:
    images = []
    for part in parts:
        if isinstance(part, ImagePart):
            if part.data is not None:
                images.append(part.data)
            else:
                warn(
                    warnings,
                    "unsupported_content",
                    "Ollama takes images as base64 data only; an image URL was dropped (send base64 `data`)",
                )
    return images


_LEVELS = ("low", "medium", "high")
#: The nearest level Ollama takes for each step of the effort ladder.
_NEAREST = {
    "none": "low",
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "high",
    "max": "high",
}


def _takes_levels(model: ModelInfo) -> bool:
    efforts = model.rules.efforts
    if efforts is not None:
        return any(e in _LEVELS for e in efforts) and "none" not in efforts
    return model.wire_name.startswith("gpt-oss")


def _think(effort: str, model: ModelInfo, warnings: list[WarningInfo]) -> bool | str:
    if not _takes_levels(model):
        return effort != "none"
    level = _NEAREST[effort]
    if level != effort:
        warn(
            warnings,
            "unsupported_setting",
            f"{model.wire_name} thinks at low, medium or high "
            f"(it cannot stop thinking); reasoning_effort {effort} was sent as {level}",
        )
    return level


def build(
    request: Request,
    model: ModelInfo,
    *,
    provider: str = API,
    options: OllamaOptions | None = None,
    wire_ids: Mapping[str, str] | None = None,
    stream: bool = True,
    instance: Mapping[str, Any] | None = None,
) -> Built:
    """`wire_ids` go unused: Ollama's tool calls have no ids (results name their tool)."""
    warnings: list[WarningInfo] = []
    opts = options_as(OllamaOptions, options, request, provider, API)
    names = _names_of_calls(request.messages)
    messages: list[dict[str, Any]] = []
    system = "\n\n".join(m.text for m in request.messages if m.role in ("system", "developer") and m.text)
    if system:
        messages.append({"role": "system", "content": system})
    for message in request.messages:
        if message.role == "user":
            entry: dict[str, Any] = {"role": "user", "content": message.text}
            images = _images(message.content, warnings)
            if images:
                entry["images"] = images
            if any(isinstance(p, (AudioPart, DocumentPart)) for p in message.content):
                warn(warnings, "unsupported_content", "Ollama takes text and images; audio and documents were dropped")
            messages.append(entry)
        elif message.role == "assistant":
            entry = {"role": "assistant", "content": message.text}
            calls = [
                {"function": {"name": p.name, "arguments": p.arguments or {}}}
                for p in message.content
                if isinstance(p, ToolCallPart)
            ]
            if calls:
                entry["tool_calls"] = calls
            if any(isinstance(p, (ThinkingPart, RedactedThinkingPart)) for p in message.content):
                warn(warnings, "thinking_dropped", "earlier reasoning is not sent to Ollama; it was dropped")
            for part in message.content:
                if isinstance(part, ProviderPart):
                    keep_provider_part(part, API, model.wire_name, warnings)  # never kept: it warns
            if entry["content"] or calls:
                messages.append(entry)
        elif message.role == "tool":
            results = [p for p in message.content if isinstance(p, ToolResultPart)]
            if not results and message.tool_call_id:
                messages.append(
                    {"role": "tool", "content": message.text, "tool_name": names.get(message.tool_call_id, "")}
                )
            for result in results:
                entry = {
                    "role": "tool",
                    "content": error_text(result),
                    "tool_name": result.name or names.get(result.tool_call_id, ""),
                }
                if not isinstance(result.content, str):
                    images = _images(list(result.content), warnings)
                    if images:
                        entry["images"] = images
                messages.append(entry)
    body: dict[str, Any] = {"model": model.wire_name, "messages": messages, "stream": stream}
    choice = request.tool_choice
    if request.tools and not (choice is not None and choice.mode == "none"):
        body["tools"] = [
            {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
            for t in request.tools
        ]
        if choice is not None and choice.mode in ("required", "tool"):
            what = "a tool call" if choice.mode == "required" else f"the tool {choice.name!r}"
            warn(warnings, "tool_choice_unsupported", f"Ollama cannot force {what}; the model may answer without it")
    fmt = request.response_format
    if fmt is not None and fmt.kind == "json_schema":
        body["format"] = fmt.schema
    elif fmt is not None and fmt.kind == "json_object":
        body["format"] = "json"
    model_options: dict[str, Any] = {}
    if request.temperature is not None:
        model_options["temperature"] = request.temperature
    if request.top_p is not None:
        model_options["top_p"] = request.top_p
    if request.seed is not None:
        model_options["seed"] = request.seed
    if request.max_tokens is not None:
        model_options["num_predict"] = request.max_tokens
    if request.stop_sequences:
        model_options["stop"] = list(request.stop_sequences)
    if opts.think is not None:
        body["think"] = opts.think
    elif request.reasoning_effort is not None:
        body["think"] = _think(request.reasoning_effort, model, warnings)
    if opts.keep_alive is not None:
        body["keep_alive"] = opts.keep_alive
    model_options.update(opts.options or {})
    if model_options:
        body["options"] = model_options
    body.update(provider_options.body_fields(opts))
    return Built(body, warnings=warnings)
