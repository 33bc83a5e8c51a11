"""Canonical request -> Anthropic Messages request body and headers. Pure.

Rules worth knowing (the tests hold each one):
* system and developer messages go to `system`, joined by a blank line;
* Anthropic wants strict user/assistant alternation: consecutive messages of
  one role are merged, and tool results travel as `tool_result` blocks in a
  user message;
* thinking goes back byte for byte only to the provider that made it (its
  signature is meaningless elsewhere) and, where the model's rules tie it to
  the model (`thinking_tied_to_model`), only to the model that wrote it; from
  anyone else it is dropped with a warning;
* the model's catalog rules decide the rest (workers/_rules.py): sampling
  parameters it does not take are left out with a warning; adaptive-thinking
  models get `thinking: {type: adaptive}` and `output_config.effort`, the older
  ones a token budget; a tool loop whose last assistant turn does not open with
  a thinking block runs with thinking off (Anthropic refuses it otherwise);
* `max_tokens` is always sent (the model's `default_max_tokens` when the request
  gives none); `tool_choice: none` is sent as Anthropic's own `none`, tools kept,
  as a history holding tool calls needs them;
* a conversation ending with an assistant message (a prefill) goes as it is: its
  text ends the last assistant turn and the answer continues it (the supervisor
  has refused what Anthropic refuses in one: a model without prefill, trailing
  whitespace, thinking, structured output);
* structured output: object schemas get the `additionalProperties: false` that
  Anthropic requires; `json_object` (any object) has no schema form and is refused;
* opaque Anthropic parts (server tool blocks, MCP, compaction) go back verbatim,
  in place; the last code-execution container of the history becomes
  `container`; anyone else's opaque parts are dropped with a warning;
* cache breakpoints: the caller's own (`cache_control` on parts and tools) go
  where it put them, and then no others are added (the caller chose what to
  cache; system parts with one are sent as blocks of their own); without any,
  breakpoints (at most 4) go on the system prompt, the last tool, and the ends
  of the last two user turns, unless `auto_cache` is false.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from ...protocol import provider_options
from ...protocol.messages import (
    AudioPart,
    CacheControl,
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
from ...protocol.provider_options import AnthropicOptions
from .. import _rules
from .._contract import Built, options_as
from .._provider_parts import keep_provider_part
from .._warnings import warn
from ..errors import ProviderError
from .response import API, CONTAINER

#: The `anthropic-version` sent unless the provider's options name another (`anthropic_version`).
API_VERSION = "2023-06-01"
#: From this version Anthropic refuses sampling parameters, document blocks in assistant
#: turns and citations on user text.
VERSION_2026_10_21 = "2026-10-21"
DEFAULT_MAX_TOKENS = 4096
#: The smallest extended-thinking budget Anthropic takes.
MIN_BUDGET = 1024
MAX_BREAKPOINTS = 4

#: Extended-thinking budget per reasoning effort (`none` leaves thinking off).
THINKING_BUDGET = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576, "xhigh": 32768, "max": 49152}
#: For adaptive-thinking models (which refuse a budget): Anthropic's effort level. Catalog
#: models list the levels they take (rules.efforts); `minimal` only reaches here for a
#: model the catalog does not know.
THINKING_EFFORT = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh", "max": "max"}
_THINKING_BLOCKS = ("thinking", "redacted_thinking")


CACHE = {"type": "ephemeral"}
_CACHEABLE = {"text", "image", "document", "tool_use", "tool_result"}
#: The canonical parts a caller may put a breakpoint on.
_MARKABLE = (TextPart, ImagePart, DocumentPart, ToolCallPart, ToolResultPart)


def _marked(block: dict[str, Any], cache: CacheControl | None) -> dict[str, Any]:
    """`block` with the caller's breakpoint, if it placed one there."""
    if cache is not None:
        block["cache_control"] = {"type": "ephemeral", "ttl": cache.ttl} if cache.ttl else dict(CACHE)
    return block


def _caller_marked(request: Request) -> bool:
    """Whether the caller placed cache breakpoints of its own (on a part or a tool)."""
    if any(t.cache_control is not None for t in request.tools):
        return True
    for m in request.messages:
        for p in m.content:
            if isinstance(p, _MARKABLE) and p.cache_control is not None:
                return True
            if (
                isinstance(p, ToolResultPart)
                and not isinstance(p.content, str)
                and any(q.cache_control is not None for q in p.content)
            ):
                return True
    return False


def _source(part: ImagePart | DocumentPart) -> dict[str, Any]:
    if part.data is not None:
        return {"type": "base64", "media_type": part.media_type, "data": part.data}
    return {"type": "url", "url": part.url}


def _document(part: DocumentPart) -> dict[str, Any]:
    if part.data is not None and part.media_type == "text/plain":
        block: dict[str, Any] = {
            "type": "document",
            "source": {
                "type": "text",
                "media_type": "text/plain",
                "data": base64.b64decode(part.data).decode("utf-8", "replace"),
            },
        }
    else:
        block = {"type": "document", "source": _source(part)}
    if part.name:
        block["title"] = part.name
    return _marked(block, part.cache_control)


def _result_content(part: ToolResultPart) -> str | list[dict[str, Any]]:
    if isinstance(part.content, str):
        return part.content
    out: list[dict[str, Any]] = []
    for p in part.content:
        if isinstance(p, TextPart):
            if p.text:
                out.append(_marked({"type": "text", "text": p.text}, p.cache_control))
        else:
            out.append(_marked({"type": "image", "source": _source(p)}, p.cache_control))
    return out


class _Translator:
    def __init__(
        self, provider: str, wire_ids: Mapping[str, str], warnings: list[WarningInfo], model: ModelInfo
    ) -> None:
        self.provider = provider
        self.wire_ids = wire_ids
        self.warnings = warnings
        self.model = model
        self.wire_model = model.wire_name
        #: The id of the last code-execution container in the history, sent as `container`.
        self.container: str | None = None

    def keep_thinking(self, part: ThinkingPart | RedactedThinkingPart) -> bool:
        signed = isinstance(part, RedactedThinkingPart) or bool(part.signature)
        if part.provider != self.provider or not signed:
            warn(
                self.warnings,
                "thinking_dropped",
                "reasoning from another provider (or without a signature) cannot be sent to Anthropic; it was dropped",
            )
            return False
        if self.model.rules.thinking_tied_to_model and part.model != self.model.wire_name:
            warn(
                self.warnings,
                "thinking_dropped",
                f"{self.model.id} accepts only its own thinking blocks (rule `thinking_tied_to_model`); "
                f"reasoning written by {part.model or 'an unrecorded model'} was dropped",
            )
            return False
        return True

    def provider_block(self, part: ProviderPart) -> dict[str, Any] | None:
        if not keep_provider_part(part, API, self.wire_model, self.warnings):
            return None
        data = part.data
        if part.kind == CONTAINER:
            if not isinstance(data, dict) or not isinstance(data.get("id"), str):
                raise ProviderError(
                    "invalid_request",
                    "an anthropic provider_part of kind container must carry an object with the container's `id`",
                )
            self.container = data["id"]
            return None
        if not isinstance(data, dict) or data.get("type") != part.kind:
            raise ProviderError(
                "invalid_request",
                f"an anthropic provider_part of kind {part.kind} must carry the "
                f"block as Anthropic sent it: an object whose `type` is {part.kind!r}",
            )
        return dict(data)

    def wire_id(self, canonical: str) -> str:
        return self.wire_ids.get(canonical, canonical)

    def blocks(self, message: Message) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for part in message.content:
            if isinstance(part, TextPart):
                if part.text:  # Anthropic refuses empty text blocks
                    out.append(_marked({"type": "text", "text": part.text}, part.cache_control))
            elif isinstance(part, ImagePart):
                out.append(_marked({"type": "image", "source": _source(part)}, part.cache_control))
            elif isinstance(part, DocumentPart):
                out.append(_document(part))
            elif isinstance(part, AudioPart):
                warn(
                    self.warnings, "unsupported_content", "Anthropic does not accept audio; the audio part was dropped"
                )
            elif isinstance(part, ToolCallPart):
                out.append(
                    _marked(
                        {
                            "type": "tool_use",
                            "id": self.wire_id(part.id),
                            "name": part.name,
                            "input": part.arguments if part.arguments is not None else {},
                        },
                        part.cache_control,
                    )
                )
            elif isinstance(part, ToolResultPart):
                block: dict[str, Any] = {
                    "type": "tool_result",
                    "tool_use_id": self.wire_id(part.tool_call_id),
                    "content": _result_content(part),
                }
                if part.is_error:
                    block["is_error"] = True
                out.append(_marked(block, part.cache_control))
            elif isinstance(part, ThinkingPart):
                if self.keep_thinking(part):
                    out.append({"type": "thinking", "thinking": part.text, "signature": part.signature})
            elif isinstance(part, RedactedThinkingPart):
                if self.keep_thinking(part):
                    out.append({"type": "redacted_thinking", "data": part.data})
            elif isinstance(part, ProviderPart):
                provider_block = self.provider_block(part)
                if provider_block is not None:
                    out.append(provider_block)
        if message.role == "tool" and message.tool_call_id and not any(b["type"] == "tool_result" for b in out):
            # The OpenAI-style form: the message's own text is the result.
            out = [{"type": "tool_result", "tool_use_id": self.wire_id(message.tool_call_id), "content": message.text}]
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


def _system_blocks(messages: list[Message]) -> list[dict[str, Any]] | None:
    """The system prompt as blocks of its own, when the caller put a breakpoint in it
    (a joined prompt would lose where); None otherwise."""
    parts = [
        p
        for m in messages
        if m.role in ("system", "developer")
        for p in m.content
        if isinstance(p, TextPart) and p.text
    ]
    if not any(p.cache_control is not None for p in parts):
        return None
    return [_marked({"type": "text", "text": p.text}, p.cache_control) for p in parts]


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


def _thinking(
    request: Request, model: ModelInfo, body: dict[str, Any], warnings: list[WarningInfo], user_max: int | None
) -> dict[str, Any] | None:
    effort = request.reasoning_effort
    rules = model.rules
    if effort is None:
        return None  # the model's own default (on or off) applies
    if effort == "none":
        # A model that thinks unasked is turned off explicitly; the rest are off by default.
        return {"type": "disabled"} if rules.thinking_default_on and not rules.thinking_always_on else None
    if not model.reasoning:
        warn(warnings, "reasoning_unsupported", f"{model.id} has no extended thinking; reasoning_effort ignored")
        return None
    if model.thinking == "adaptive":
        # Newer models decide how long to think; a token budget is refused, an effort steers.
        body.setdefault("output_config", {})["effort"] = THINKING_EFFORT[effort]
        return {"type": "adaptive"}
    return _room_to_answer({"type": "enabled", "budget_tokens": THINKING_BUDGET[effort]}, body, warnings, user_max)


def _room_to_answer(
    thinking: dict[str, Any], body: dict[str, Any], warnings: list[WarningInfo], user_max: int | None
) -> dict[str, Any] | None:
    """An extended-thinking budget Anthropic takes: at least MIN_BUDGET, and below max_tokens
    (thinking counts against it; Anthropic refuses a budget that is not). A limit the caller
    did not set is raised to make room; the caller's own limit stays and the budget goes under it."""
    budget = thinking.get("budget_tokens")
    if thinking.get("type") != "enabled" or not isinstance(budget, int) or isinstance(budget, bool):
        return thinking
    if budget < MIN_BUDGET:
        warn(
            warnings,
            "thinking_budget_changed",
            f"Anthropic takes a thinking budget of at least {MIN_BUDGET} tokens; {budget} was sent as {MIN_BUDGET}",
        )
        budget = MIN_BUDGET
    max_tokens = body["max_tokens"]
    if budget >= max_tokens:
        if user_max is None:
            body["max_tokens"] = budget + DEFAULT_MAX_TOKENS
        elif max_tokens <= MIN_BUDGET:
            warn(
                warnings,
                "reasoning_unsupported",
                f"max_tokens {max_tokens} leaves no room for thinking (at least {MIN_BUDGET}); thinking left off",
            )
            return None
        else:
            lowered = max(MIN_BUDGET, max_tokens // 2)
            warn(
                warnings,
                "thinking_budget_changed",
                f"a thinking budget of {budget} would use all of max_tokens {max_tokens}, leaving no answer; "
                f"the budget was lowered to {lowered}",
            )
            budget = lowered
    return {**thinking, "budget_tokens": budget}


def _thinks(thinking: dict[str, Any] | None, model: ModelInfo) -> bool:
    """Whether the model will think on a call sent with `thinking`."""
    if model.rules.thinking_always_on:
        return True
    if thinking is None:
        return model.rules.thinking_default_on
    return thinking.get("type") not in ("disabled", None)


def _thinking_off(model: ModelInfo) -> dict[str, Any] | None:
    return {"type": "disabled"} if model.rules.thinking_default_on else None


def _tool_loop_without_thinking(messages: list[dict[str, Any]]) -> bool:
    """A tool loop whose last assistant turn does not open with a thinking block: Anthropic
    refuses it while thinking is on (history from another provider, or dropped thinking)."""
    if len(messages) < 2 or messages[-1]["role"] != "user" or messages[-2]["role"] != "assistant":
        return False
    if not any(b.get("type") == "tool_result" for b in messages[-1]["content"]):
        return False
    turn = messages[-2]["content"]
    return not turn or turn[0].get("type") not in _THINKING_BLOCKS


def _strict_schema(schema: Any, path: str = "schema") -> Any:
    """`schema` with `additionalProperties: false` on every object, as structured outputs require."""
    if isinstance(schema, list):
        return [_strict_schema(s, f"{path}[{i}]") for i, s in enumerate(schema)]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict_schema(v, f"{path}.{k}") for k, v in schema.items()}
    is_object = (
        out.get("type") == "object"
        or (isinstance(out.get("type"), list) and "object" in out["type"])
        or "properties" in out
    )
    if is_object:
        extra = out.get("additionalProperties")
        if extra not in (None, False):
            raise ProviderError(
                "invalid_request",
                f"response_format {path} allows additional properties; "
                "Anthropic structured outputs need `additionalProperties: false` on every object",
            )
        out["additionalProperties"] = False
    return out


def _output_format(request: Request, model: ModelInfo) -> dict[str, Any] | None:
    fmt = request.response_format
    if fmt is None or fmt.kind == "text":
        return None
    if fmt.kind == "json_object":
        raise ProviderError(
            "invalid_request",
            "response_format json_object (any JSON object) has no form in "
            f"Anthropic structured outputs, which need a schema; send json_schema to {model.id}",
        )
    return {"type": "json_schema", "schema": _strict_schema(fmt.schema)}


def _tool(tool: Any, model: ModelInfo) -> dict[str, Any]:
    out: dict[str, Any] = {"name": tool.name}
    if tool.description:
        out["description"] = tool.description
    out["input_schema"] = tool.parameters
    if tool.strict is not None and model.structured_output:
        out["strict"] = tool.strict
    return _marked(out, tool.cache_control)


def _history_tools(messages: list[dict[str, Any]]) -> list[str]:
    """The names of the tools the history's tool_use blocks call, in order of first use."""
    names: dict[str, None] = {}
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                if block.get("type") == "tool_use" and block.get("name"):
                    names.setdefault(block["name"])
    return list(names)


def api_version(instance: Mapping[str, Any] | None) -> str:
    """The `anthropic-version` a provider instance speaks (its options' `anthropic_version`)."""
    version = (instance or {}).get("anthropic_version")
    return version if isinstance(version, str) else API_VERSION


def _rules_of_2026_10_21(body: dict[str, Any], warnings: list[WarningInfo]) -> None:
    """What anthropic-version 2026-10-21 refuses: sampling parameters are left out (with a
    warning); a document in an assistant turn or citations on a user's text cannot be
    sent, and nothing is (the call would only be refused, after the upload)."""
    for name in ("temperature", "top_p", "top_k"):
        if body.pop(name, None) is not None:
            warn(
                warnings,
                "sampling_unsupported",
                f"anthropic-version {VERSION_2026_10_21} takes no {name}; it was left out",
            )
    for i, message in enumerate(body["messages"]):
        for j, block in enumerate(message["content"]):
            where = f"messages[{i}].content[{j}]"
            if message["role"] == "assistant" and block.get("type") == "document":
                raise ProviderError(
                    "invalid_request",
                    f"{where}: anthropic-version {VERSION_2026_10_21} takes no document in an assistant turn",
                )
            if message["role"] != "user":
                continue
            inner = block.get("content") if block.get("type") == "tool_result" else None
            for text in [block, *(inner if isinstance(inner, list) else [])]:
                if text.get("type") == "text" and text.get("citations"):
                    raise ProviderError(
                        "invalid_request",
                        f"{where}: anthropic-version {VERSION_2026_10_21} takes no citations on a user's text",
                    )


def build(
    request: Request,
    model: ModelInfo,
    *,
    provider: str = API,
    options: AnthropicOptions | None = None,
    wire_ids: Mapping[str, str] | None = None,
    stream: bool = True,
    instance: Mapping[str, Any] | None = None,
) -> Built:
    warnings: list[WarningInfo] = []
    opts = options_as(AnthropicOptions, options, request, provider, API)
    translator = _Translator(provider, wire_ids or {}, warnings, model)
    user_max = request.max_tokens
    body: dict[str, Any] = {
        "model": model.wire_name,
        "max_tokens": user_max or model.rules.default_max_tokens or DEFAULT_MAX_TOKENS,
        "messages": translator.messages(request.messages),
    }
    system = _system(request.messages)
    caller_marked = _caller_marked(request)
    auto_cache = opts.auto_cache and not caller_marked
    system_blocks = _system_blocks(request.messages) if caller_marked else None
    if system_blocks is not None:
        body["system"] = system_blocks
    elif system:
        body["system"] = [{"type": "text", "text": system}] if auto_cache else system
    choice = request.tool_choice
    if request.tools:
        body["tools"] = [_tool(t, model) for t in request.tools]
        if choice is not None and choice.mode == "none":
            body["tool_choice"] = {"type": "none"}
        elif choice is not None and choice.mode == "required":
            body["tool_choice"] = {"type": "any"}
        elif choice is not None and choice.mode == "tool":
            body["tool_choice"] = {"type": "tool", "name": choice.name}
    else:
        named = _history_tools(body["messages"])
        if named:
            # Anthropic refuses tool_use/tool_result blocks unless their tools are defined
            # (a conversation carried on without its tools, or from another provider). The
            # tools the history names are declared, permissively, and none may be called.
            body["tools"] = [
                {
                    "name": name,
                    "description": "A tool called earlier in this conversation.",
                    "input_schema": {"type": "object"},
                }
                for name in named
            ]
            body["tool_choice"] = {"type": "none"}
            warn(
                warnings,
                "tools_from_history",
                "the history holds tool calls but the request has no tools: the "
                f"tools it names ({', '.join(named)}) were declared so Anthropic accepts it, and none may be called",
            )
    if opts.tools:
        # Anthropic's server tools (web search, code execution...), appended to the request's.
        body["tools"] = body.get("tools", []) + opts.tools
    if translator.container is not None:
        body["container"] = translator.container  # provider_options.anthropic.container still wins
    if request.stop_sequences:
        body["stop_sequences"] = list(request.stop_sequences)
    body.update(_rules.sampling({"temperature": request.temperature, "top_p": request.top_p}, request, model, warnings))
    if request.seed is not None:
        warn(warnings, "unsupported_setting", "Anthropic has no seed; it was ignored")
    user_id = request.metadata.get("user_id")
    if user_id:
        body["metadata"] = {"user_id": user_id}
    output_format = _output_format(request, model)
    if output_format is not None:
        body["output_config"] = {"format": output_format}
    if opts.thinking:
        _rules.option_overrides_effort(request, "provider_options.anthropic.thinking", warnings)
        thinking = _room_to_answer(opts.thinking, body, warnings, user_max)
    else:
        thinking = _thinking(request, model, body, warnings, user_max)
    if _thinks(thinking, model) and opts.thinking is None and not model.rules.thinking_always_on:
        forced = body.get("tool_choice", {}).get("type") in ("any", "tool")
        if request.reasoning_effort is None and forced:
            # Thinking was not asked for, a tool was: honour the tool.
            thinking = _thinking_off(model)
            warn(
                warnings,
                "thinking_off",
                f"{model.id} cannot force a tool while thinking, and thinking was "
                "not asked for; thinking is off for this call so the tool choice holds",
            )
        elif _tool_loop_without_thinking(body["messages"]):
            thinking = _thinking_off(model)
            body.get("output_config", {}).pop("effort", None)
            if not body.get("output_config", True):
                body.pop("output_config")
            warn(
                warnings,
                "thinking_off",
                "the last assistant turn of this tool loop does not begin with a "
                "thinking block (history from another provider or model), which Anthropic refuses while "
                "thinking; thinking is off for this call",
            )
    if thinking is not None:
        body["thinking"] = thinking
    if _thinks(thinking, model):
        # Extended thinking allows neither a sampling temperature nor a forced tool.
        if body.pop("temperature", None) is not None:
            warn(warnings, "unsupported_setting", "temperature cannot be set with extended thinking; ignored")
        if "top_p" in body and body["top_p"] < 0.95:
            body.pop("top_p")
            warn(warnings, "unsupported_setting", "top_p below 0.95 cannot be used with extended thinking; ignored")
        if body.get("tool_choice", {}).get("type") in ("any", "tool"):
            body.pop("tool_choice")
            warn(
                warnings,
                "unsupported_setting",
                "a forced tool_choice cannot be used with extended thinking; the model chooses (auto)",
            )
    if stream:
        body["stream"] = True
    body.update(provider_options.body_fields(opts))
    version = api_version(instance)
    if version == VERSION_2026_10_21:
        _rules_of_2026_10_21(body, warnings)
    if auto_cache:
        _add_cache_breakpoints(body)
    headers = {"anthropic-version": version}
    betas = [opts.beta_headers] if isinstance(opts.beta_headers, str) else opts.beta_headers
    if betas:
        headers["anthropic-beta"] = ",".join(betas)
    if not body["messages"]:
        raise ProviderError("invalid_request", "nothing to send: every message was empty after translation")
    return Built(body, headers=headers, warnings=warnings)
