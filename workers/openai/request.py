"""Canonical request -> Responses API body. Pure.

Rules worth knowing (the tests hold each one):
* system and developer messages go to `instructions`, joined by a blank line;
  every other message becomes `input` items, in order;
* an assistant turn is split into items in its own order: text into assistant
  `message` items with string content (the SDK's `EasyInputMessageParam`; the
  `output_text` list form needs the item's id, status and annotations, which a
  turn from elsewhere lacks), with the `phase` kept from the response it came from;
  tool calls into `function_call` items, OpenAI's opaque items (reasoning with
  its `encrypted_content`, built-in tool calls) back verbatim;
* `store` is false unless the caller asks otherwise, so reasoning survives the
  round trip only as `encrypted_content`: it is always requested for reasoning
  models; reasoning from another provider is dropped with a warning;
* a strict `json_schema` response format or strict tool has `additionalProperties:
  false` put on every object that leaves it unsaid (OpenAI refuses a strict schema without it);
  a schema strict mode cannot take (an optional property, an open object) is sent
  with `strict: false` and a warning, as the client validates the result anyway;
* function tools are sent with `strict: false` unless the tool says otherwise
  (the Responses API defaults to strict, which refuses most hand-written schemas);
* what the model's catalog rules forbid (a sampling parameter, an effort value)
  is changed or left out with a warning naming the rule; a `max_output_tokens`
  below 16 (which the API refuses) is raised to 16, and a `reasoning` given in
  provider options wins over `reasoning_effort`, with a warning each.
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
from ...protocol.provider_options import OpenAIOptions
from .. import _rules
from .._contract import Built, options_as
from .._provider_parts import keep_provider_part
from .._warnings import warn
from ..errors import ProviderError

#: The `api` of every ProviderPart this worker makes and takes back.
API = "openai"
#: The smallest `max_output_tokens` the Responses API takes (a smaller one is refused).
MIN_OUTPUT_TOKENS = 16


#: The effort ladder, least to most (as `ReasoningEffort`).
EFFORTS = ["none", "minimal", "low", "medium", "high", "xhigh", "max"]


def _data_uri(media_type: str | None, data: str) -> str:
    return f"data:{media_type or 'application/octet-stream'};base64,{data}"


def image_item(part: ImagePart) -> dict[str, Any]:
    url = part.url if part.data is None else _data_uri(part.media_type, part.data)
    return {"type": "input_image", "image_url": url, "detail": part.detail or "auto"}


def file_item(part: DocumentPart) -> dict[str, Any]:
    if part.data is not None:
        item: dict[str, Any] = {
            "type": "input_file",
            "file_data": _data_uri(part.media_type, part.data),
            "filename": part.name or _default_filename(part.media_type),
        }
    else:
        item = {"type": "input_file", "file_url": part.url}
        if part.name:
            item["filename"] = part.name
    return item


def _default_filename(media_type: str | None) -> str:
    # The API wants a file name with inline data; its extension tells it how to read the file.
    return (
        "document.pdf"
        if media_type in (None, "application/pdf")
        else "document.txt"
        if media_type == "text/plain"
        else "document"
    )


#: Keywords whose value is one subschema / a list of them / a map of them.
_SUBSCHEMA = ("items", "not", "additionalProperties")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")


def strict_schema(schema: Any) -> tuple[Any, str | None]:
    """`schema` as strict structured outputs take it, or why it cannot be: the Responses API
    refuses a strict schema unless every object says `additionalProperties: false` and
    requires all its properties. An object that leaves it unsaid is closed here (what a
    schema made from a class means); one that allows extra keys or has an optional
    property is a reason to send the schema non-strict instead."""
    if not isinstance(schema, dict):
        return schema, None
    out = dict(schema)
    problem: str | None = None
    for key in _SUBSCHEMA:
        if isinstance(out.get(key), dict):
            out[key], why = strict_schema(out[key])
            problem = problem or why
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            fixed = [strict_schema(s) for s in out[key]]
            out[key] = [s for s, _ in fixed]
            problem = problem or next((why for _, why in fixed if why), None)
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            fixed_map = {name: strict_schema(s) for name, s in out[key].items()}
            out[key] = {name: s for name, (s, _) in fixed_map.items()}
            problem = problem or next((why for _, why in fixed_map.values() if why), None)
    declared = out.get("type")
    kinds: list[Any] = declared if isinstance(declared, list) else [declared]
    if "object" in kinds or "properties" in out:
        if out.get("additionalProperties", False) is not False:
            problem = problem or "an object allows additional properties"
        elif "properties" not in out and "additionalProperties" not in out:
            problem = problem or "an object lists no properties (any object)"  # closing it would allow only {}
        else:
            out["additionalProperties"] = False
        optional = set(out.get("properties") or {}) - set(out.get("required") or [])
        if optional:
            problem = problem or f"properties {', '.join(sorted(optional))} are optional"
    return out, problem


def _strict_or_not(schema: Any, strict: bool, what: str, warnings: list[WarningInfo]) -> tuple[Any, bool]:
    """The schema and strict flag to send: closed if strict mode can take it, else as given, non-strict."""
    if not strict:
        return schema, False
    closed, problem = strict_schema(schema)
    if problem is None:
        return closed, True
    warn(
        warnings,
        "unsupported_setting",
        f"OpenAI's strict mode needs every object closed and all its "
        f"properties required, but in {what} {problem}; it was sent with strict false",
    )
    return schema, False


def nearest_effort(wanted: str, allowed: list[str]) -> str:
    """The allowed effort closest to `wanted` on the ladder (the higher one on a tie)."""
    position = EFFORTS.index(wanted)
    return min(allowed, key=lambda e: (abs(EFFORTS.index(e) - position), -EFFORTS.index(e)))


class _Translator:
    def __init__(self, model: ModelInfo, wire_ids: Mapping[str, str], warnings: list[WarningInfo]) -> None:
        self.model = model
        self.wire_ids = wire_ids
        self.warnings = warnings

    def wire_id(self, canonical: str) -> str:
        return self.wire_ids.get(canonical, canonical)

    def audio_item(self, part: AudioPart) -> dict[str, Any]:
        raise ProviderError(
            "invalid_request",
            f"the Responses API takes no audio input (model {self.model.id}); "
            "remove the audio part, or transcribe it first",
        )

    def user_content(self, part: Any) -> dict[str, Any] | None:
        if isinstance(part, TextPart):
            return {"type": "input_text", "text": part.text} if part.text else None
        if isinstance(part, ImagePart):
            return image_item(part)
        if isinstance(part, DocumentPart):
            return file_item(part)
        if isinstance(part, AudioPart):
            return self.audio_item(part)
        return None

    def result_item(self, call_id: str, content: str | list[TextPart | ImagePart], is_error: bool) -> dict[str, Any]:
        output: str | list[dict[str, Any]]
        if isinstance(content, str):
            # The item has no error flag: the model is told in words.
            output = f"ERROR: {content}" if is_error else content
        else:
            output = [self.user_content(p) or {"type": "input_text", "text": ""} for p in content]
            if is_error:
                output.insert(0, {"type": "input_text", "text": "ERROR:"})
        return {"type": "function_call_output", "call_id": self.wire_id(call_id), "output": output}

    def user(self, message: Message) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        content: list[dict[str, Any]] = []
        for part in message.content:
            if isinstance(part, ToolResultPart):
                items.append(self.result_item(part.tool_call_id, part.content, part.is_error))
                continue
            item = self.user_content(part)
            if item is not None:
                content.append(item)
            elif isinstance(part, (ThinkingPart, RedactedThinkingPart, ProviderPart, ToolCallPart)):
                warn(
                    self.warnings,
                    "unsupported_content",
                    f"a {part.__class__.__name__} in a user message has no place in OpenAI's input; it was dropped",
                )
        if content:
            # After any tool results it holds: those answer the calls of the turn before.
            items.append({"type": "message", "role": "user", "content": content})
        return items

    def assistant(self, message: Message) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        text_item: dict[str, Any] | None = None
        phase: str | None = None
        keeps_reasoning = any(
            isinstance(p, ProviderPart)
            and p.api == API
            and p.kind == "reasoning"
            and (p.model is None or p.model == self.model.wire_name)
            for p in message.content
        )
        for part in message.content:
            if isinstance(part, TextPart):
                if not part.text:
                    continue
                if text_item is None:
                    text_item = {"type": "message", "role": "assistant", "content": ""}
                    if phase:
                        text_item["phase"] = phase
                        phase = None  # it labels this message item only
                    items.append(text_item)
                text_item["content"] += part.text
                continue
            text_item = None
            if isinstance(part, ToolCallPart):
                arguments = (
                    part.raw_arguments
                    if part.arguments is None and part.raw_arguments
                    else json.dumps(part.arguments or {}, ensure_ascii=False)
                )
                items.append(
                    {
                        "type": "function_call",
                        "call_id": self.wire_id(part.id),
                        "name": part.name,
                        "arguments": arguments,
                    }
                )
            elif isinstance(part, ToolResultPart):
                items.append(self.result_item(part.tool_call_id, part.content, part.is_error))
            elif isinstance(part, ProviderPart):
                if not keep_provider_part(part, API, self.model.wire_name, self.warnings):
                    continue
                if part.kind == "message":
                    # The marker of a message item's phase: the text that follows belongs to it.
                    phase = part.data.get("phase") if isinstance(part.data, dict) else None
                elif isinstance(part.data, dict):
                    items.append(part.data)
            elif isinstance(part, (ThinkingPart, RedactedThinkingPart)):
                # OpenAI's own reasoning travels in its reasoning item (a ProviderPart); the
                # summary text beside it is only for people to read.
                if not keeps_reasoning:
                    warn(
                        self.warnings,
                        "thinking_dropped",
                        "reasoning from another provider (or without its "
                        "OpenAI reasoning item) cannot be sent to OpenAI; it was dropped",
                    )
            elif isinstance(part, (ImagePart, DocumentPart, AudioPart)):
                warn(
                    self.warnings,
                    "unsupported_content",
                    "OpenAI takes no images, audio or documents in an assistant turn; the part was dropped",
                )
        return items

    def tool(self, message: Message) -> list[dict[str, Any]]:
        results = [p for p in message.content if isinstance(p, ToolResultPart)]
        if not results and message.tool_call_id:
            return [self.result_item(message.tool_call_id, message.text, False)]
        return [self.result_item(p.tool_call_id, p.content, p.is_error) for p in results]


def _instructions(messages: list[Message]) -> str:
    return "\n\n".join(m.text for m in messages if m.role in ("system", "developer") and m.text)


def _effort(request: Request, model: ModelInfo, warnings: list[WarningInfo]) -> str | None:
    """The effort to send (None: send none), following the model's rules."""
    wanted = request.reasoning_effort
    if wanted is None:
        return None
    if not model.reasoning and model.in_catalog:
        if wanted != "none":
            warn(warnings, "reasoning_unsupported", f"{model.id} is not a reasoning model; reasoning_effort ignored")
        return None
    allowed = model.rules.efforts
    if allowed and wanted not in allowed:
        chosen = nearest_effort(wanted, list(allowed))
        warn(
            warnings,
            "reasoning_effort_changed",
            f"{model.id} takes reasoning efforts {', '.join(allowed)} (rule: efforts); {wanted} was sent as {chosen}",
        )
        return chosen
    return wanted


def _sampling(
    request: Request, model: ModelInfo, effort: str | None, body: dict[str, Any], warnings: list[WarningInfo]
) -> None:
    rules = model.rules
    reasoning_on = model.reasoning and effort != "none"
    for name in ("temperature", "top_p"):
        value = getattr(request, name)
        if value is None:
            continue
        if rules.sampling is not None and name not in rules.sampling:
            warn(warnings, "unsupported_setting", f"{model.id} does not take {name} (rule: sampling); it was left out")
        elif rules.sampling_needs_no_reasoning and reasoning_on:
            warn(
                warnings,
                "unsupported_setting",
                f"{model.id} takes {name} only with reasoning_effort none "
                f"(rule: sampling_needs_no_reasoning); it was left out",
            )
        elif rules.sampling_exclusive and any(k in body for k in ("temperature", "top_p")):
            warn(
                warnings,
                "unsupported_setting",
                f"{model.id} takes one sampling parameter at a time (rule: sampling_exclusive); {name} was left out",
            )
        else:
            body[name] = value


def build(
    request: Request,
    model: ModelInfo,
    *,
    provider: str = API,
    options: OpenAIOptions | None = None,
    wire_ids: Mapping[str, str] | None = None,
    stream: bool = True,
    instance: Mapping[str, Any] | None = None,
) -> Built:
    warnings: list[WarningInfo] = []
    opts = options_as(OpenAIOptions, options, request, provider, API)
    t = _Translator(model, wire_ids or {}, warnings)
    items: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role in ("system", "developer"):
            if any(not isinstance(p, TextPart) for p in message.content):
                warn(
                    warnings,
                    "unsupported_content",
                    f"instructions take text only; a non-text part of a {message.role} message was dropped",
                )
            continue
        if message.role == "user":
            items.extend(t.user(message))
        elif message.role == "assistant":
            items.extend(t.assistant(message))
        elif message.role == "tool":
            items.extend(t.tool(message))
    if not items:
        raise ProviderError("invalid_request", "nothing to send: every message was empty after translation")
    body: dict[str, Any] = {"model": model.wire_name}
    instructions = _instructions(request.messages)
    if instructions:
        body["instructions"] = instructions
    body["input"] = items
    body["store"] = False
    if request.tools:
        body["tools"] = []
        for tool in request.tools:
            spec: dict[str, Any] = {"type": "function", "name": tool.name}
            if tool.description:
                spec["description"] = tool.description
            spec["parameters"], spec["strict"] = _strict_or_not(
                tool.parameters, bool(tool.strict), f"tool {tool.name}'s parameters", warnings
            )
            body["tools"].append(spec)
        choice = request.tool_choice
        if choice is not None:
            body["tool_choice"] = {"type": "function", "name": choice.name} if choice.mode == "tool" else choice.mode
    max_tokens = request.max_tokens or model.rules.default_max_tokens
    if max_tokens is not None:
        if max_tokens < MIN_OUTPUT_TOKENS:
            warn(
                warnings,
                "max_tokens_raised",
                f"the Responses API takes max_output_tokens of at least {MIN_OUTPUT_TOKENS}; "
                f"{max_tokens} was sent as {MIN_OUTPUT_TOKENS}",
            )
            max_tokens = MIN_OUTPUT_TOKENS
        body["max_output_tokens"] = max_tokens
    if request.stop_sequences:
        warn(warnings, "unsupported_setting", "the Responses API has no stop sequences; stop_sequences was ignored")
    if request.seed is not None:
        warn(warnings, "unsupported_setting", "the Responses API takes no seed; it was ignored")
    effort = _effort(request, model, warnings)
    if effort is not None:
        reasoning: dict[str, Any] = {"effort": effort}
        if opts.reasoning_summary and effort != "none":
            reasoning["summary"] = opts.reasoning_summary
        body["reasoning"] = reasoning
    _sampling(request, model, effort, body, warnings)
    include = list(opts.include or ())
    reasons = model.reasoning or (not model.in_catalog and effort not in (None, "none"))
    if reasons and "reasoning.encrypted_content" not in include:
        include.insert(0, "reasoning.encrypted_content")
    if include:
        body["include"] = include
    fmt = request.response_format
    if fmt is not None and fmt.kind == "json_schema":
        schema, strict = _strict_or_not(fmt.schema, bool(fmt.strict), "response_format.schema", warnings)
        spec = {"type": "json_schema", "name": fmt.name or "response", "schema": schema}
        if fmt.strict is not None:
            spec["strict"] = strict
        body["text"] = {"format": spec}
    elif fmt is not None and fmt.kind == "json_object":
        body["text"] = {"format": {"type": "json_object"}}
    if request.metadata.get("user_id"):
        body["safety_identifier"] = request.metadata["user_id"]
    if stream:
        body["stream"] = True
    if opts.background:
        # Background mode keeps the response at OpenAI, so a dropped stream can be resumed
        # (and a cancel reach it); it needs `store`, which is why it is the caller's choice.
        body["background"] = True
        body["store"] = True
    passed = provider_options.body_fields(opts)
    if "reasoning" in passed:
        _rules.option_overrides_effort(request, "provider_options.openai.reasoning", warnings)
    body.update(passed)
    return Built(body, warnings=warnings)
