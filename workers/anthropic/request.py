"""Canonical request -> Anthropic Messages request body and headers. Pure.

Rules worth knowing (the tests hold each one):
* system and developer messages go to `system`, joined by a blank line;
* Anthropic wants strict user/assistant alternation: consecutive messages of
  one role are merged, and tool results travel as `tool_result` blocks in a
  user message;
* thinking goes back byte for byte only to the provider that made it (its
  signature is meaningless elsewhere); from anyone else it is dropped with a
  warning;
* `max_tokens` is always sent; `tool_choice: none` leaves the tools out;
* cache breakpoints (at most 4) go on the system prompt, the last tool, and the
  ends of the last two user turns, unless `auto_cache` is false.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

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
from .._provider_parts import keep_provider_part
from .._warnings import warn
from ..errors import ProviderError

API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
MAX_BREAKPOINTS = 4

#: Extended-thinking budget per reasoning effort (`none` leaves thinking off).
THINKING_BUDGET = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576}
#: For adaptive-thinking models (which refuse a budget): the effort level instead.
THINKING_EFFORT = {"minimal": "low", "low": "low", "medium": "medium", "high": "high"}

#: provider_options.anthropic keys this module reads itself; any other key is merged into the body.
OWN_OPTIONS = {"beta_headers", "thinking", "auto_cache"}

CACHE = {"type": "ephemeral"}
_CACHEABLE = {"text", "image", "document", "tool_use", "tool_result"}


@dataclass(slots=True)
class Built:
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    warnings: list[WarningInfo] = field(default_factory=list)


def _source(part: ImagePart | DocumentPart) -> dict[str, Any]:
    if part.data is not None:
        return {"type": "base64", "media_type": part.media_type, "data": part.data}
    return {"type": "url", "url": part.url}


def _document(part: DocumentPart) -> dict[str, Any]:
    if part.data is not None and part.media_type == "text/plain":
        block: dict[str, Any] = {"type": "document", "source": {
            "type": "text", "media_type": "text/plain", "data": base64.b64decode(part.data).decode("utf-8", "replace")}}
    else:
        block = {"type": "document", "source": _source(part)}
    if part.name:
        block["title"] = part.name
    return block


def _result_content(part: ToolResultPart) -> str | list[dict[str, Any]]:
    if isinstance(part.content, str):
        return part.content
    out: list[dict[str, Any]] = []
    for p in part.content:
        if isinstance(p, TextPart):
            if p.text:
                out.append({"type": "text", "text": p.text})
        else:
            out.append({"type": "image", "source": _source(p)})
    return out


class _Translator:
    def __init__(self, provider: str, wire_ids: dict[str, str], warnings: list[WarningInfo]) -> None:
        self.provider = provider
        self.wire_ids = wire_ids
        self.warnings = warnings

    def wire_id(self, canonical: str) -> str:
        return self.wire_ids.get(canonical, canonical)

    def blocks(self, message: Message) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for part in message.content:
            if isinstance(part, TextPart):
                if part.text:  # Anthropic refuses empty text blocks
                    out.append({"type": "text", "text": part.text})
            elif isinstance(part, ImagePart):
                out.append({"type": "image", "source": _source(part)})
            elif isinstance(part, DocumentPart):
                out.append(_document(part))
            elif isinstance(part, AudioPart):
                warn(self.warnings, "unsupported_content", "Anthropic does not accept audio; the audio part was dropped")
            elif isinstance(part, ToolCallPart):
                out.append({"type": "tool_use", "id": self.wire_id(part.id), "name": part.name,
                            "input": part.arguments if part.arguments is not None else {}})
            elif isinstance(part, ToolResultPart):
                block: dict[str, Any] = {"type": "tool_result", "tool_use_id": self.wire_id(part.tool_call_id),
                                         "content": _result_content(part)}
                if part.is_error:
                    block["is_error"] = True
                out.append(block)
            elif isinstance(part, ThinkingPart):
                if part.provider == self.provider and part.signature:
                    out.append({"type": "thinking", "thinking": part.text, "signature": part.signature})
                else:
                    warn(self.warnings, "thinking_dropped", "reasoning from another provider (or without a "
                          "signature) cannot be sent to Anthropic; it was dropped")
            elif isinstance(part, RedactedThinkingPart):
                if part.provider == self.provider:
                    out.append({"type": "redacted_thinking", "data": part.data})
                else:
                    warn(self.warnings, "thinking_dropped", "reasoning from another provider (or without a "
                          "signature) cannot be sent to Anthropic; it was dropped")
            elif isinstance(part, ProviderPart) and part.api != "anthropic":
                # Another API's opaque content (Gemini's thought signatures...): said, then left out.
                keep_provider_part(part, "anthropic", "", self.warnings)
        if message.role == "tool" and message.tool_call_id and not any(b["type"] == "tool_result" for b in out):
            # The OpenAI-style form: the message's own text is the result.
            out = [{"type": "tool_result", "tool_use_id": self.wire_id(message.tool_call_id),
                    "content": message.text}]
        return out

    def messages(self, messages: list[Message]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for message in messages:
            if message.role in ("system", "developer"):
                continue
            role = "assistant" if message.role == "assistant" else "user"
            blocks = self.blocks(message)
            if not blocks:
                continue
            if out and out[-1]["role"] == role:
                out[-1]["content"].extend(blocks)
            else:
                out.append({"role": role, "content": blocks})
        for m in out:
            if m["role"] == "user":
                # Anthropic wants tool results first in a user turn.
                m["content"].sort(key=lambda b: b["type"] != "tool_result")
        return out


def _system(messages: list[Message]) -> str:
    return "\n\n".join(m.text for m in messages if m.role in ("system", "developer") and m.text)


def _mark_last_cacheable(blocks: list[dict[str, Any]]) -> bool:
    for block in reversed(blocks):
        if block.get("type") in _CACHEABLE and (block.get("type") != "text" or block.get("text")):
            block["cache_control"] = dict(CACHE)
            return True
    return False


def _add_cache_breakpoints(body: dict[str, Any]) -> None:
    budget = MAX_BREAKPOINTS - sum(1 for b in _all_blocks(body) if "cache_control" in b)
    if budget <= 0:
        return
    if isinstance(body.get("system"), list) and body["system"]:
        budget -= _mark_last_cacheable(body["system"])
    if budget > 0 and body.get("tools"):
        body["tools"][-1]["cache_control"] = dict(CACHE)
        budget -= 1
    # The conversation prefix: the end of the last user turn (this request's read and
    # write point) and of the one before (last request's write point, read now).
    user_turns = [m for m in body["messages"] if m["role"] == "user"]
    for turn in reversed(user_turns[-2:]):
        if budget <= 0:
            break
        budget -= _mark_last_cacheable(turn["content"])


def _all_blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = list(body["system"]) if isinstance(body.get("system"), list) else []
    blocks += body.get("tools") or []
    for m in body["messages"]:
        blocks += m["content"]
    return blocks


def _thinking(request: Request, model: ModelInfo, body: dict[str, Any], warnings: list[WarningInfo],
              user_max: int | None) -> dict[str, Any] | None:
    effort = request.reasoning_effort
    if effort is None or effort == "none":
        return None
    if not model.reasoning:
        warn(warnings, "reasoning_unsupported", f"{model.id} has no extended thinking; reasoning_effort ignored")
        return None
    if model.thinking == "adaptive":
        # Newer models decide how long to think; a token budget is refused, an effort steers.
        body.setdefault("output_config", {})["effort"] = THINKING_EFFORT[effort]
        return {"type": "adaptive"}
    budget = THINKING_BUDGET[effort]
    max_tokens = body["max_tokens"]
    if budget >= max_tokens:
        if user_max is not None:
            if max_tokens <= 1024:
                warn(warnings, "reasoning_unsupported",
                      f"max_tokens {max_tokens} leaves no room for thinking (at least 1024); thinking left off")
                return None
            budget = max(1024, max_tokens // 2)
        else:
            body["max_tokens"] = budget + DEFAULT_MAX_TOKENS
    return {"type": "enabled", "budget_tokens": budget}


def build(request: Request, model: ModelInfo, *, provider: str, wire_ids: dict[str, str], stream: bool) -> Built:
    warnings: list[WarningInfo] = []
    options = dict(request.provider_options.get(provider) or request.provider_options.get("anthropic") or {})
    translator = _Translator(provider, wire_ids, warnings)
    user_max = request.max_tokens
    body: dict[str, Any] = {
        "model": model.wire_name,
        "max_tokens": user_max or model.max_output or DEFAULT_MAX_TOKENS,
        "messages": translator.messages(request.messages),
    }
    system = _system(request.messages)
    auto_cache = options.get("auto_cache", True) is not False
    if system:
        body["system"] = [{"type": "text", "text": system}] if auto_cache else system
    choice = request.tool_choice
    if request.tools and not (choice is not None and choice.mode == "none"):
        body["tools"] = [{"name": t.name, "description": t.description, "input_schema": t.parameters}
                         if t.description else {"name": t.name, "input_schema": t.parameters} for t in request.tools]
        if choice is not None and choice.mode == "required":
            body["tool_choice"] = {"type": "any"}
        elif choice is not None and choice.mode == "tool":
            body["tool_choice"] = {"type": "tool", "name": choice.name}
    if request.stop_sequences:
        body["stop_sequences"] = list(request.stop_sequences)
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.seed is not None:
        warn(warnings, "unsupported_setting", "Anthropic has no seed; it was ignored")
    user_id = request.metadata.get("user_id")
    if user_id:
        body["metadata"] = {"user_id": user_id}
    fmt = request.response_format
    if fmt is not None and fmt.kind == "json_schema" and fmt.schema is not None:
        body["output_config"] = {"format": {"type": "json_schema", "schema": fmt.schema}}
    elif fmt is not None and fmt.kind == "json_object":
        body["output_config"] = {"format": {"type": "json_schema", "schema": {"type": "object"}}}
    thinking = options.get("thinking") or _thinking(request, model, body, warnings, user_max)
    if thinking is not None:
        body["thinking"] = thinking
        if thinking.get("type") in ("enabled", "adaptive"):
            # Extended thinking allows neither a sampling temperature nor a forced tool.
            if body.pop("temperature", None) is not None:
                warn(warnings, "unsupported_setting", "temperature cannot be set with extended thinking; ignored")
            if "top_p" in body and body["top_p"] < 0.95:
                body.pop("top_p")
                warn(warnings, "unsupported_setting", "top_p below 0.95 cannot be used with extended thinking; ignored")
            if body.get("tool_choice", {}).get("type") in ("any", "tool"):
                body.pop("tool_choice")
                warn(warnings, "unsupported_setting",
                      "a forced tool_choice cannot be used with extended thinking; the model chooses (auto)")
    if stream:
        body["stream"] = True
    for key, value in options.items():
        if key not in OWN_OPTIONS:
            body[key] = value
    if auto_cache:
        _add_cache_breakpoints(body)
    headers = {"anthropic-version": API_VERSION}
    betas = options.get("beta_headers") or []
    if isinstance(betas, str):
        betas = [betas]
    if betas:
        headers["anthropic-beta"] = ",".join(str(b) for b in betas)
    if not body["messages"]:
        raise ProviderError("invalid_request", "nothing to send: every message was empty after translation")
    return Built(body, headers, warnings)
