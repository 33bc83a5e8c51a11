"""Canonical request -> Gemini `generateContent` body. Pure.

Rules worth knowing (the tests hold each one):
* system and developer messages go to `systemInstruction`; roles are `user`
  and `model`, consecutive messages of one role merge into one turn (tool
  results answering parallel calls must share a turn);
* a tool result is a `functionResponse` carrying the function's name (looked
  up from the call in the history) and an object: a string becomes
  `{"result": ...}`, an error `{"error": ...}`;
* thought signatures travel as `ProviderPart(kind="thoughtSignature")` right
  after the part they sat on, and go back onto that same wire part, only to
  the same model on the same provider instance (they are bound to both);
  elsewhere they are dropped with a warning. A Gemini 3+ model refuses a turn
  whose first function call has no signature, so a call that lost its own (or
  came from another provider) gets the validator-skip marker Google
  documents for transplanted history;
* other Gemini parts (code execution, server tool calls, a signed empty text
  part) are `ProviderPart`s holding the wire part verbatim;
* `reasoning_effort` becomes `thinkingLevel` on models that take levels and
  `thinkingBudget` on the others, per the catalog (`ModelInfo.thinking`); a
  budget (the effort's, or the caller's `thinking_config`) stays within the
  model's documented range and a level within its documented levels, and a
  budget at or above `maxOutputTokens` (which would leave no answer) gets room:
  the limit is raised when the caller set none, else the budget lowered. A
  caller's `thinking_config` wins over `reasoning_effort`. Each with a warning;
* at most 5 stop sequences are sent (the first 5), with a warning.
"""

from __future__ import annotations

import contextlib
import json
import mimetypes
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

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
from ...protocol.provider_options import GeminiOptions
from .. import _rules
from .._contract import Built, options_as
from .._provider_parts import keep_provider_part
from .._warnings import warn
from ..errors import ProviderError

API = "gemini"
#: Stop sequences generationConfig takes at most (more are refused).
MAX_STOP_SEQUENCES = 5
API_PATH = "/v1beta/models"
#: Google's documented marker for a function call whose signature was not made by this model.
SKIP_SIGNATURE = "skip_thought_signature_validator"
SIGNATURE_KIND = "thoughtSignature"
METADATA_KINDS = ("groundingMetadata", "urlContextMetadata")

_V = TypeVar("_V")

#: Ladder order, to find the nearest effort a model takes.
EFFORTS = ["none", "minimal", "low", "medium", "high", "xhigh", "max"]
#: Effort -> thinkingLevel, for models steered by level (Gemini 3.5+, Argon refuse a budget).
THINKING_LEVEL = {
    "minimal": "MINIMAL",
    "low": "LOW",
    "medium": "MEDIUM",
    "high": "HIGH",
    "xhigh": "XHIGH",
    "max": "XHIGH",
}
#: Effort -> thinkingBudget tokens, for models steered by budget (Gemini 2.x), before
#: the model's own range (BUDGET_RANGES) bounds it.
THINKING_BUDGET = {"minimal": 512, "low": 2048, "medium": 8192, "high": 24576, "xhigh": 32768, "max": 32768}
#: thinkingBudget values that are no number of tokens: the model decides (dynamic).
DYNAMIC_BUDGET = -1


@dataclass(frozen=True, slots=True)
class BudgetRange:
    """The thinkingBudget values a model takes with thinking on (both ends included), and
    whether 0 turns thinking off on it."""

    low: int
    high: int
    can_turn_off: bool


#: Documented budget ranges (ai.google.dev/gemini-api/docs/thinking), by wire-name
#: prefix, the most specific first; a budget outside is refused.
BUDGET_RANGES: tuple[tuple[str, BudgetRange], ...] = (
    ("gemini-2.5-flash-lite", BudgetRange(512, 24576, can_turn_off=True)),
    ("gemini-2.5-flash", BudgetRange(1, 24576, can_turn_off=True)),
    ("gemini-2.5-pro", BudgetRange(128, 32768, can_turn_off=False)),
)
#: Documented thinkingLevel values of models that take fewer than the whole ladder (by
#: wire-name prefix), for a model whose catalog entry does not list its efforts.
LEVEL_EFFORTS: tuple[tuple[str, list[str]], ...] = (
    ("gemini-3-flash", ["minimal", "low", "medium", "high"]),
    ("gemini-3-pro", ["low", "high"]),
)

#: The body fields of provider_options.gemini that Gemini spells in camelCase.
_SNAKE = {
    "safety_settings": "safetySettings",
    "cached_content": "cachedContent",
    "service_tier": "serviceTier",
    "tool_config": "toolConfig",
}


def model_path(wire_name: str) -> str:
    name = wire_name.removeprefix("models/")
    return f"{API_PATH}/{name}"


def generation(wire_name: str) -> int | None:
    """The major version in a Gemini model name (`gemini-3.8-flash` -> 3)."""
    m = re.search(r"gemini-(\d+)", wire_name)
    return int(m.group(1)) if m else None


def _by_prefix(wire_name: str, table: tuple[tuple[str, _V], ...]) -> _V | None:
    name = wire_name.removeprefix("models/")
    return next((value for prefix, value in table if name.startswith(prefix)), None)


def budget_range(model: ModelInfo) -> BudgetRange | None:
    """The thinkingBudget range Google documents for `model`, if any."""
    return _by_prefix(model.wire_name, BUDGET_RANGES)


def allowed_efforts(model: ModelInfo) -> list[str]:
    """The efforts the model takes (empty: any): the catalog's, else what Google documents."""
    listed = model.rules.efforts or (_by_prefix(model.wire_name, LEVEL_EFFORTS) if uses_levels(model) else None)
    return [e for e in (listed or []) if e in EFFORTS]


def uses_levels(model: ModelInfo) -> bool:
    """Whether `model` is steered by `thinkingLevel` rather than `thinkingBudget`."""
    if model.thinking is not None:
        return model.thinking == "adaptive"
    # Not in the catalog (or no rule yet): Gemini 3 and later take levels.
    return (generation(model.wire_name) or 0) >= 3


def _media(part: ImagePart | AudioPart | DocumentPart, warnings: list[WarningInfo]) -> dict[str, Any] | None:
    if part.data is not None:
        if not part.media_type:
            raise ProviderError(
                "invalid_request",
                "an inline image, audio or document part needs media_type (Gemini's inlineData requires a mimeType)",
            )
        return {"inlineData": {"mimeType": part.media_type, "data": part.data}}
    if part.url:
        data: dict[str, Any] = {"fileUri": part.url}
        kind = part.media_type or mimetypes.guess_type(part.url.split("?", 1)[0])[0]
        if kind:
            data["mimeType"] = kind
        return {"fileData": data}
    warn(warnings, "unsupported_content", "a media part with neither data nor url was dropped")
    return None


class _Translator:
    def __init__(
        self, model: ModelInfo, provider: str, wire_ids: Mapping[str, str], warnings: list[WarningInfo]
    ) -> None:
        self.model = model
        self.provider = provider
        self.wire_ids = wire_ids
        self.warnings = warnings
        # Gemini 3 and later validate signatures on function calls.
        self.strict_signatures = uses_levels(model) or (generation(model.wire_name) or 0) >= 3
        #: canonical call id -> (function name, the id to send or None for an id-less Gemini call)
        self.calls: dict[str, tuple[str, str | None]] = {}

    def remember_calls(self, messages: list[Message]) -> None:
        for message in messages:
            for part in message.content:
                if type(part) is ToolCallPart:
                    self.calls[part.id] = (part.name, self.call_id(part))

    def call_id(self, part: ToolCallPart) -> str | None:
        if part.provider == self.provider:
            # Ours: Gemini's own id, or none (2.x never gives one; the runtime minted ours).
            return part.provider_id or None
        return self.wire_ids.get(part.id, part.id)

    def signature_ok(self, part: ProviderPart) -> bool:
        if not keep_provider_part(part, API, self.model.wire_name, self.warnings):
            return False
        if part.provider is not None and part.provider != self.provider:
            warn(
                self.warnings,
                "provider_part_dropped",
                f"gemini content ({part.kind}) came from provider {part.provider} (another key); "
                f"it was left out for {self.provider}",
            )
            return False
        return True

    def parts(self, message: Message) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        host: dict[str, Any] | None = None  # the wire part a following signature belongs to
        for part in message.content:
            wire: dict[str, Any] | None = None
            if isinstance(part, TextPart):
                if part.text:
                    wire = {"text": part.text}
            elif isinstance(part, (ImagePart, AudioPart, DocumentPart)):
                wire = _media(part, self.warnings)
            elif isinstance(part, ToolCallPart):
                call: dict[str, Any] = {"name": part.name, "args": part.arguments or {}}
                call_id = self.call_id(part)
                if call_id:
                    call["id"] = call_id
                wire = {"functionCall": call}
            elif isinstance(part, ToolResultPart):
                wire = self.function_response(part.tool_call_id, part.content, part.is_error, part.name)
            elif isinstance(part, ThinkingPart):
                if part.provider is None or part.provider == self.provider:
                    wire = {"text": part.text, "thought": True}
                else:
                    warn(
                        self.warnings,
                        "thinking_dropped",
                        f"reasoning from {part.provider} cannot be sent to Gemini; it was dropped",
                    )
            elif isinstance(part, RedactedThinkingPart):
                warn(
                    self.warnings,
                    "thinking_dropped",
                    f"encrypted reasoning from {part.provider or 'another provider'} cannot be sent to Gemini; "
                    "it was dropped",
                )
            elif isinstance(part, ProviderPart):
                if part.api == API and part.kind == SIGNATURE_KIND:
                    if self.signature_ok(part):
                        if host is not None:
                            host["thoughtSignature"] = part.data
                        else:  # nothing to sit on: a signed empty text part, as Gemini itself sends
                            out.append({"text": "", "thoughtSignature": part.data})
                    host = None
                    continue
                if part.api == API and part.kind in METADATA_KINDS:
                    host = None
                    continue  # the answer's grounding, for the caller: not a part Gemini takes back
                if self.signature_ok(part) and isinstance(part.data, dict):
                    wire = dict(part.data)
            if wire is not None:
                out.append(wire)
            host = wire
        if message.role == "tool" and message.tool_call_id and not any("functionResponse" in p for p in out):
            out = [self.function_response(message.tool_call_id, message.text, False, message.name)]
        return out

    def function_response(
        self, canonical: str, content: str | list[TextPart | ImagePart], is_error: bool, name: str | None
    ) -> dict[str, Any]:
        known = self.calls.get(canonical)
        fn = name or (known[0] if known else None)
        if not fn:
            raise ProviderError(
                "invalid_request",
                f"tool result for {canonical!r} answers no tool call in the "
                "conversation, and Gemini needs the function's name: give ToolResultPart.name",
            )
        media: list[dict[str, Any]] = []
        if isinstance(content, str):
            text = content
        else:
            text = "".join(p.text for p in content if isinstance(p, TextPart))
            for p in content:
                if isinstance(p, ImagePart) and (m := _media(p, self.warnings)) is not None:
                    media.append(m)
        value: Any = text
        if text.strip()[:1] in ("{", "["):
            with contextlib.suppress(ValueError):  # a JSON result goes as structure, not as a quoted string
                value = json.loads(text)
        response = {"error": value} if is_error else (value if isinstance(value, dict) else {"result": value})
        body: dict[str, Any] = {"name": fn, "response": response}
        call_id = known[1] if known else self.wire_ids.get(canonical, canonical)
        if call_id:
            body["id"] = call_id
        if media:
            body["parts"] = media
        return {"functionResponse": body}

    def contents(self, messages: list[Message]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for message in messages:
            if message.role in ("system", "developer"):
                continue
            role = "model" if message.role == "assistant" else "user"
            parts = self.parts(message)
            if not parts:
                continue
            if out and out[-1]["role"] == role:
                out[-1]["parts"].extend(parts)
            else:
                out.append({"role": role, "parts": parts})
        if self.strict_signatures:
            for turn in out:
                if turn["role"] != "model":
                    continue
                calls = [p for p in turn["parts"] if "functionCall" in p]
                if calls and not any("thoughtSignature" in p for p in calls):
                    calls[0]["thoughtSignature"] = SKIP_SIGNATURE
        return out


def _nearest_effort(effort: str, allowed: list[str]) -> str:
    if not allowed:
        return effort
    i = EFFORTS.index(effort)
    return min(allowed, key=lambda e: (abs(EFFORTS.index(e) - i), -EFFORTS.index(e)))


def _bounded_budget(budget: int, model: ModelInfo, why: str, warnings: list[WarningInfo]) -> int:
    """`budget` within the model's documented range (`why`: what asked for it)."""
    rng = budget_range(model)
    if rng is None or budget == DYNAMIC_BUDGET or (budget == 0 and rng.can_turn_off):
        return budget
    bounded = min(max(budget, rng.low), rng.high)
    if bounded != budget:
        off = " (thinking cannot be turned off on it)" if budget == 0 else ""
        warn(
            warnings,
            "thinking_budget_changed",
            f"{model.wire_name} takes a thinking budget of {rng.low}-{rng.high} tokens{off}; "
            f"{why} ({budget}) was sent as {bounded}",
        )
    return bounded


def _caller_thinking(
    config: dict[str, Any], request: Request, model: ModelInfo, warnings: list[WarningInfo]
) -> dict[str, Any]:
    """The caller's thinking_config as sent: it wins over reasoning_effort, within what the model takes."""
    _rules.option_overrides_effort(request, "provider_options.gemini.thinking_config", warnings)
    config = dict(config)
    budget = config.get("thinkingBudget")
    if isinstance(budget, int) and not isinstance(budget, bool):
        config["thinkingBudget"] = _bounded_budget(budget, model, "thinking_config.thinkingBudget", warnings)
    level = config.get("thinkingLevel")
    allowed = allowed_efforts(model)
    if isinstance(level, str) and allowed and level.lower() in EFFORTS and level.lower() not in allowed:
        chosen = _nearest_effort(level.lower(), allowed)
        config["thinkingLevel"] = THINKING_LEVEL[chosen]
        warn(
            warnings,
            "unsupported_setting",
            f"{model.wire_name} takes thinking levels {', '.join(THINKING_LEVEL[e] for e in allowed)}; "
            f"thinking_config.thinkingLevel {level} was sent as {THINKING_LEVEL[chosen]}",
        )
    return config


def _thinking(request: Request, model: ModelInfo, warnings: list[WarningInfo]) -> dict[str, Any] | None:
    if request.reasoning_effort is None:
        return None
    effort: str = request.reasoning_effort
    rules = model.rules
    allowed = allowed_efforts(model)
    levels = uses_levels(model)
    rng = budget_range(model)
    if allowed and effort not in allowed and effort != "none":
        chosen = _nearest_effort(effort, allowed)
        warn(
            warnings,
            "unsupported_setting",
            f"{model.wire_name} does not take reasoning_effort {effort}; {chosen} was used",
        )
        effort = chosen
    if effort == "none":
        cannot_turn_off = rules.thinking_always_on or (rng is not None and not rng.can_turn_off)
        if cannot_turn_off or levels or (allowed and "none" not in allowed):
            lowest = next((e for e in EFFORTS[1:] if not allowed or e in allowed), "minimal")
            warn(
                warnings,
                "unsupported_setting",
                f"thinking cannot be turned off on {model.wire_name}; the lowest level ({lowest}) was used",
            )
            if levels:
                return {"thinkingLevel": THINKING_LEVEL[lowest]}
            return {"thinkingBudget": max(THINKING_BUDGET[lowest], rng.low if rng else 0)}
        return {"thinkingBudget": 0}
    if levels:
        if effort == "max":
            warn(warnings, "unsupported_setting", "Gemini's highest thinking level is XHIGH; it was used for max")
        return {"thinkingLevel": THINKING_LEVEL[effort], "includeThoughts": True}
    budget = THINKING_BUDGET[effort]
    if rng is not None and effort in ("xhigh", "max"):
        budget = rng.high  # the top of the ladder is the model's own largest budget
    return {
        "thinkingBudget": _bounded_budget(budget, model, f"reasoning_effort {effort}", warnings),
        "includeThoughts": True,
    }


def _room_to_answer(gen: dict[str, Any], request: Request, model: ModelInfo, warnings: list[WarningInfo]) -> None:
    """Thinking counts against maxOutputTokens: a budget at or above it leaves the answer
    empty. A limit the caller did not set is raised to make room; the caller's own limit
    stays, and the budget is lowered under it."""
    thinking = gen.get("thinkingConfig") or {}
    budget, limit = thinking.get("thinkingBudget"), gen.get("maxOutputTokens")
    if not (isinstance(budget, int) and isinstance(limit, int)) or budget <= 0 or budget < limit:
        return
    if request.max_tokens is None:
        raised = budget + limit
        if model.max_output:
            raised = min(raised, model.max_output)
        if raised > limit:
            gen["maxOutputTokens"] = raised
            warn(
                warnings,
                "max_tokens_raised",
                f"the thinking budget ({budget}) would use all of maxOutputTokens {limit}, leaving no answer; "
                f"maxOutputTokens was raised to {raised}",
            )
            return
    rng = budget_range(model)
    lowered = limit // 2
    if rng is not None and lowered < rng.low:
        if rng.can_turn_off:
            gen["thinkingConfig"] = {**thinking, "thinkingBudget": 0}
            gen["thinkingConfig"].pop("includeThoughts", None)
            warn(
                warnings,
                "thinking_off",
                f"max_tokens {limit} leaves no room for {model.wire_name}'s smallest thinking budget "
                f"({rng.low}) and an answer; thinking is off for this call",
            )
            return
        lowered = rng.low
    if lowered < 1:
        return  # nothing smaller to ask for; the provider decides
    gen["thinkingConfig"] = {**thinking, "thinkingBudget": lowered}
    warn(
        warnings,
        "thinking_budget_changed",
        f"a thinking budget of {budget} would use all of max_tokens {limit}, leaving no answer; "
        f"the budget was lowered to {lowered}",
    )


def _sampling(
    request: Request, model: ModelInfo, thinking_on: bool, gen: dict[str, Any], warnings: list[WarningInfo]
) -> None:
    wanted = {"temperature": request.temperature, "top_p": request.top_p}
    rules = model.rules
    for name, value in wanted.items():
        if value is None:
            continue
        if rules.sampling is not None and name not in rules.sampling:
            warn(warnings, "unsupported_setting", f"{model.wire_name} does not take {name}; it was ignored")
            continue
        if rules.sampling_needs_no_reasoning and thinking_on:
            warn(warnings, "unsupported_setting", f"{model.wire_name} takes {name} only with reasoning off; ignored")
            continue
        if rules.sampling_exclusive and ("temperature" in gen or "topP" in gen):
            warn(
                warnings,
                "unsupported_setting",
                f"{model.wire_name} takes one sampling parameter at a time; {name} was ignored",
            )
            continue
        gen["temperature" if name == "temperature" else "topP"] = value


def build(
    request: Request,
    model: ModelInfo,
    *,
    provider: str = API,
    options: GeminiOptions | None = None,
    wire_ids: Mapping[str, str] | None = None,
    stream: bool = True,
    instance: Mapping[str, Any] | None = None,
) -> Built:
    warnings: list[WarningInfo] = []
    opts = options_as(GeminiOptions, options, request, provider, API)
    tr = _Translator(model, provider, wire_ids or {}, warnings)
    tr.remember_calls(request.messages)
    body: dict[str, Any] = {"contents": tr.contents(request.messages)}
    if not body["contents"]:
        raise ProviderError("invalid_request", "nothing to send: every message was empty after translation")
    system = "\n\n".join(m.text for m in request.messages if m.role in ("system", "developer") and m.text)
    if system:
        body["systemInstruction"] = {"parts": [{"text": system}]}

    tools: list[dict[str, Any]] = []
    choice = request.tool_choice
    if request.tools:
        decls = []
        for tool in request.tools:
            decl: dict[str, Any] = {"name": tool.name, "parametersJsonSchema": tool.parameters}
            if tool.description:
                decl["description"] = tool.description
            decls.append(decl)
        tools.append({"functionDeclarations": decls})
        if choice is not None:
            mode = {"auto": "AUTO", "none": "NONE", "required": "ANY", "tool": "ANY"}[choice.mode]
            config: dict[str, Any] = {"mode": mode}
            if choice.mode == "tool" and choice.name:
                config["allowedFunctionNames"] = [choice.name]
            body["toolConfig"] = {"functionCallingConfig": config}
    for value, wire_name in (
        (opts.google_search, "googleSearch"),
        (opts.code_execution, "codeExecution"),
        (opts.url_context, "urlContext"),
    ):
        if value:
            tools.append({wire_name: value if isinstance(value, dict) else {}})
    if opts.tools:
        tools.extend(opts.tools)
    if tools:
        body["tools"] = tools

    gen: dict[str, Any] = {}
    max_tokens = request.max_tokens or model.rules.default_max_tokens
    if max_tokens:
        gen["maxOutputTokens"] = max_tokens
    if opts.thinking_config:
        thinking: dict[str, Any] | None = _caller_thinking(opts.thinking_config, request, model, warnings)
    else:
        thinking = _thinking(request, model, warnings)
    thinking_on = thinking is not None and thinking.get("thinkingBudget") != 0
    _sampling(request, model, thinking_on, gen, warnings)
    if request.stop_sequences:
        gen["stopSequences"] = _rules.stop_sequences(request, MAX_STOP_SEQUENCES, "Gemini", warnings)
    if request.seed is not None:
        gen["seed"] = request.seed
    fmt = request.response_format
    if fmt is not None and fmt.kind == "json_schema" and fmt.schema is not None:
        gen["responseMimeType"] = "application/json"
        gen["responseJsonSchema"] = fmt.schema
    elif fmt is not None and fmt.kind in ("json_object", "json_schema"):
        gen["responseMimeType"] = "application/json"
    if thinking:
        gen["thinkingConfig"] = thinking
    if opts.generation_config:
        if "thinkingConfig" in opts.generation_config:
            _rules.option_overrides_effort(
                request, "provider_options.gemini.generation_config.thinkingConfig", warnings
            )
        gen.update(opts.generation_config)
    _room_to_answer(gen, request, model, warnings)
    if gen:
        body["generationConfig"] = gen
    for key, value in provider_options.body_fields(opts).items():
        body[_SNAKE.get(key, key)] = value
    action = "streamGenerateContent?alt=sse" if stream else "generateContent"
    return Built(body, warnings=warnings, path=f"{model_path(model.wire_name)}:{action}")
