"""Anthropic's Messages body -> a canonical `Request`, for the provider it goes to. Pure.

What the canonical form has no words for is said to an Anthropic provider as its
own options and refused, with a sentence, for any other:

* server tools (any tool whose `type` is not `custom`), and Anthropic-only fields of
  custom tools (`defer_loading`, `input_examples`...): to an Anthropic provider the
  client's `tools` (and `tool_choice`) go as sent, in `extra_body`; the custom tools
  are also given canonically, so the daemon checks them and the history's calls;
* `thinking` goes as given (`provider_options.anthropic.thinking`); elsewhere it
  becomes `reasoning_effort` (a budget by the ladder the Anthropic worker uses the
  other way, `disabled` as `none`, `adaptive` as `output_config.effort`), moved to the
  nearest effort the model takes;
* `output_config` goes as given; elsewhere its `format` is the canonical
  `response_format` and its `effort` the `reasoning_effort`;
* `container`, `context_management`, `inference_geo`, `mcp_servers`: Anthropic's
  options, refused elsewhere; `cache_control` (top level), `service_tier`, `speed`,
  `diagnostics`: Anthropic's options, without effect elsewhere; `top_k` goes to each
  provider's own option, and is refused by OpenAI's Responses, which has none; any
  other field goes to an Anthropic provider in `extra_body` and is refused elsewhere;
* `disable_parallel_tool_use` is OpenAI's `parallel_tool_calls: false`, and refused
  where a provider has no such switch;
* the `anthropic-beta` header: `provider_options.anthropic.beta_headers`.

A block's `cache_control` is the canonical `cache_control` of its part (or tool).
A `thinking` or `redacted_thinking` block coming back is taken as the serving
provider's own (its signature was made there, and goes back byte for byte).
Anthropic's server-tool blocks in the history are opaque `provider_part`s of api
`anthropic`. Tool results travel in canonical `tool` messages, before the rest of
the user's turn. What a user turn can hold that the canonical form cannot (Files API
sources, search results, a document's citations) is refused.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import msgspec

from ..protocol.messages import (
    CacheControl,
    ContentPart,
    DocumentPart,
    ImagePart,
    Message,
    ProviderPart,
    ReasoningEffort,
    RedactedThinkingPart,
    Request,
    ResponseFormat,
    TextPart,
    ThinkingPart,
    Tool,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
)
from .app import Headers
from .errors import HttpError, refuse
from .targets import Target

#: `anthropic-version` values the API documents. The door reads a body the same way under
#: each: 2026-10-21 refuses `temperature`, `top_p` and `top_k`, but behind this door they
#: still reach the providers that take them (the Anthropic worker speaks the version its
#: provider's `options.anthropic_version` names, 2023-06-01 unless set, and applies that
#: version's rules itself).
VERSIONS = frozenset({"2023-01-01", "2023-06-01", "2026-10-21"})
#: `ProviderPart.api` of Anthropic's blocks (the Anthropic worker's).
API = "anthropic"

_TOOL_CHOICE: dict[str, Literal["auto", "none", "required", "tool"]] = {
    "auto": "auto",
    "any": "required",
    "tool": "tool",
    "none": "none",
}
#: Fields of a custom tool the canonical `Tool` holds; any other is Anthropic's own.
_TOOL_FIELDS = frozenset({"type", "name", "description", "input_schema", "strict", "cache_control"})
#: Anthropic's options elsewhere: refused (they change what the call does) ...
_ANTHROPIC_ONLY = ("container", "context_management", "inference_geo", "mcp_servers")
#: ... or without effect (hints about Anthropic's own caching, capacity and reports).
_ANTHROPIC_HINTS = ("cache_control", "service_tier", "speed", "diagnostics")
#: Those `AnthropicOptions` takes by name; the rest go in its `extra_body`.
_OPTION_NAMES = frozenset(
    {"container", "context_management", "inference_geo", "mcp_servers", "cache_control", "service_tier"}
)
#: `thinking` types `AnthropicOptions.thinking` knows (others go in `extra_body`, unchecked).
_THINKING_TYPES = frozenset({"enabled", "disabled", "adaptive"})

#: The reasoning ladder, least to most, and the thinking budget each step stands for
#: (the Anthropic worker's own ladder, read the other way).
LADDER: tuple[ReasoningEffort, ...] = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
BUDGETS: tuple[tuple[int, ReasoningEffort], ...] = (
    (1024, "minimal"),
    (2048, "low"),
    (8192, "medium"),
    (24576, "high"),
    (32768, "xhigh"),
)


# -- the wire's shapes (what msgspec checks as it converts) ----------------------------


class _Cache(msgspec.Struct):
    type: Literal["ephemeral"]
    ttl: str | None = None


class _Message(msgspec.Struct):
    role: Literal["user", "assistant"]
    content: str | list[dict[str, Any]]


class _Body(msgspec.Struct, kw_only=True):
    model: str
    messages: list[_Message]
    max_tokens: int | None = None
    system: str | list[dict[str, Any]] | None = None
    metadata: dict[str, Any] | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None
    output_config: dict[str, Any] | None = None
    provider_options: dict[str, dict[str, Any]] | None = None


#: The top-level fields read one by one; any other is a provider option.
_READ = frozenset(f.name for f in msgspec.structs.fields(_Body))


class _Text(msgspec.Struct):
    text: str
    cache_control: _Cache | None = None


class _Source(msgspec.Struct):
    type: str
    media_type: str | None = None
    data: str | None = None
    url: str | None = None


class _Media(msgspec.Struct):
    source: _Source
    cache_control: _Cache | None = None
    title: str | None = None
    context: str | None = None
    citations: dict[str, Any] | None = None


class _ToolUse(msgspec.Struct):
    id: str
    name: str
    input: dict[str, Any]
    cache_control: _Cache | None = None


class _ToolResult(msgspec.Struct):
    tool_use_id: str
    content: str | list[dict[str, Any]] = ""
    is_error: bool = False
    cache_control: _Cache | None = None


class _Thinking(msgspec.Struct):
    thinking: str
    signature: str


class _Redacted(msgspec.Struct):
    data: str


class _Tool(msgspec.Struct):
    name: str
    input_schema: dict[str, Any]
    description: str = ""
    strict: bool | None = None
    cache_control: _Cache | None = None


class _ToolChoice(msgspec.Struct):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class _ThinkingConfig(msgspec.Struct):
    type: str
    budget_tokens: int | None = None


class _OutputConfig(msgspec.Struct):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: dict[str, Any] | None = None


_T = TypeVar("_T")


def _convert(value: Any, shape: type[_T], where: str) -> _T:
    """`value` as `shape`, or the client's error naming the place (`messages.0.content.1.text`)."""
    try:
        return msgspec.convert(value, shape)
    except msgspec.ValidationError as exc:
        raise refuse(_explain(str(exc), where), param=where or None) from None


def _explain(message: str, where: str) -> str:
    text, sep, path = message.rpartition(" - at `")
    if not sep:
        return f"{where}: {message}" if where else message
    path = path.rstrip("`").removeprefix("$")
    path = path.replace("[", ".").replace("]", "").lstrip(".")
    place = ".".join(p for p in (where, path) if p)
    return f"{place}: {text}" if place else text


def _cache(value: _Cache | None) -> CacheControl | None:
    return CacheControl(ttl=value.ttl) if value is not None else None


# -- request: Messages body -> canonical ---------------------------------------------


@dataclass
class Translated:
    """A Messages body as a canonical request, and what the answer needs."""

    request: Request
    stream: bool
    model: str
    target: Target


def check_version(headers: Headers) -> None:
    version = headers.get("anthropic-version")
    if version is not None and version.strip() not in VERSIONS:
        raise refuse(
            f"anthropic-version {version!r} is not a version of the Messages API this door speaks "
            f"({', '.join(sorted(VERSIONS))})"
        )


def betas(headers: Headers) -> list[str]:
    """The `anthropic-beta` header's features, in order."""
    value = headers.get("anthropic-beta") or ""
    return [b.strip() for b in value.split(",") if b.strip()]


class _Options:
    """The request's `provider_options`, with the target's own entry to add to: the
    entry the serving worker reads (its instance name's, else its type's)."""

    def __init__(self, given: dict[str, dict[str, Any]] | None, target: Target) -> None:
        self.all: dict[str, dict[str, Any]] = dict(given or {})
        self.target = target

    def mine(self) -> dict[str, Any]:
        name, kind = self.target.provider, self.target.provider_type
        assert name is not None, "only a resolved target has options of its own"
        assert kind is not None
        key = name if name in self.all or kind not in self.all else kind
        entry = self.all[key] = dict(self.all.get(key) or {})
        return entry

    def extra_body(self) -> dict[str, Any]:
        mine = self.mine()
        extra = mine["extra_body"] = dict(mine.get("extra_body") or {})
        return extra


def to_request(body: Any, target: Target, beta: list[str] | None = None, *, count: bool = False) -> Translated:
    """A Messages body (decoded JSON) as a canonical request for `target`.

    `count`: the body of `count_tokens`, which has no `max_tokens`."""
    if not isinstance(body, dict):
        raise refuse("the request body must be a JSON object")
    wire = _convert(body, _Body, "")
    if not wire.model:
        raise refuse("model: a model is required", param="model")
    if not count and wire.max_tokens is None:
        raise refuse("max_tokens: Field required", param="max_tokens")
    if not wire.messages:
        raise refuse("messages: at least one message is required", param="messages")
    options = _Options(wire.provider_options, target)

    messages = _system(wire.system)
    for i, m in enumerate(wire.messages):
        messages += _message(m, i, target)
    request = Request(model=wire.model, messages=messages)
    if not count:
        request.max_tokens = wire.max_tokens
    request.temperature = wire.temperature
    request.top_p = wire.top_p
    if wire.stop_sequences:
        request.stop_sequences = wire.stop_sequences
    if wire.metadata:
        request.metadata = _metadata(wire.metadata)
    _tool_settings(request, wire, options, target)
    if wire.thinking is not None:
        _thinking(request, wire.thinking, options, target)
    if wire.output_config is not None:
        _output_config(request, wire.output_config, options, target)
    if wire.top_k is not None:
        _top_k(wire.top_k, options, target)
    _other_fields(body, options, target)
    if target.provider_type == "anthropic" and beta:
        mine = options.mine()
        given = mine.get("beta_headers")
        given = [given] if isinstance(given, str) else list(given or [])
        mine["beta_headers"] = given + [b for b in beta if b not in given]
    if options.all:
        request.provider_options = options.all
    return Translated(request, wire.stream, wire.model, target)


def _tool_settings(request: Request, wire: _Body, options: _Options, target: Target) -> None:
    request.tools, verbatim = _tools(wire.tools or [], target)
    choice = _convert(wire.tool_choice, _ToolChoice, "tool_choice") if wire.tool_choice is not None else None
    if choice is not None:
        if choice.type == "tool" and not choice.name:
            raise refuse("tool_choice.name: a tool choice of type `tool` names the tool", param="tool_choice.name")
        request.tool_choice = ToolChoice(mode=_TOOL_CHOICE[choice.type], name=choice.name)
    one_at_a_time = choice is not None and choice.disable_parallel_tool_use is not None
    if target.provider_type == "anthropic" and (verbatim or one_at_a_time):
        extra = options.extra_body()
        if verbatim:
            extra["tools"] = wire.tools
        # The choice goes with the tools as sent (a tool loop whose tools all went as
        # sent has no canonical ones, and the worker would forbid calls).
        extra["tool_choice"] = wire.tool_choice if wire.tool_choice is not None else {"type": "auto"}
    elif choice is not None and choice.disable_parallel_tool_use:
        _one_call_at_a_time(options, target)


def _other_fields(body: dict[str, Any], options: _Options, target: Target) -> None:
    """The top-level fields the canonical form has no words for."""
    anthropic = target.provider_type == "anthropic"
    for name, value in body.items():
        if name in _READ:
            continue
        if anthropic:
            if name in _OPTION_NAMES:
                options.mine()[name] = value
            else:
                options.extra_body()[name] = value
        elif target.provider_type is not None and name not in _ANTHROPIC_HINTS:
            what = "an Anthropic feature" if name in _ANTHROPIC_ONLY else "not a Messages API field this door knows"
            raise refuse(f"`{name}` is {what}; {target.named()} has no equivalent", param=name)
    if anthropic and "cache_control" in body and "auto_cache" not in options.mine():
        options.mine()["auto_cache"] = False  # the client chose Anthropic's own automatic caching


def _system(system: str | list[dict[str, Any]] | None) -> list[Message]:
    if system is None:
        return []
    if isinstance(system, str):
        return [Message.system(system)] if system else []
    parts: list[ContentPart] = []
    for j, block in enumerate(system):
        where = f"system.{j}"
        if block.get("type") != "text":
            raise refuse(f"{where}.type: a system prompt holds text blocks only", param=f"{where}.type")
        text = _convert(block, _Text, where)
        if text.text:
            parts.append(TextPart(text=text.text, cache_control=_cache(text.cache_control)))
    return [Message(role="system", content=parts)] if parts else []


def _metadata(metadata: dict[str, Any]) -> dict[str, str]:
    for key in metadata:
        if key != "user_id":
            raise refuse(f"metadata.{key}: Extra inputs are not permitted (metadata takes `user_id`)", param="metadata")
    user = metadata.get("user_id")
    if user is None:
        return {}
    if not isinstance(user, str):
        raise refuse("metadata.user_id: Expected `str`", param="metadata.user_id")
    return {"user_id": user}


def _message(m: _Message, i: int, target: Target) -> list[Message]:
    where = f"messages.{i}.content"
    blocks = [{"type": "text", "text": m.content}] if isinstance(m.content, str) else m.content
    if m.role == "assistant":
        return [
            Message(
                role="assistant", content=[_assistant_part(b, f"{where}.{j}", target) for j, b in enumerate(blocks)]
            )
        ]
    results: list[ContentPart] = []
    parts: list[ContentPart] = []
    for j, block in enumerate(blocks):
        if block.get("type") == "tool_result":
            results.append(_tool_result(block, f"{where}.{j}"))
        else:
            parts.append(_user_part(block, f"{where}.{j}"))
    # Canonical tool results travel in a `tool` message, before what the user adds.
    out = [Message(role="tool", content=results)] if results else []
    if parts or not results:
        out.append(Message(role="user", content=parts))
    return out


def _user_part(block: dict[str, Any], where: str) -> ContentPart:
    kind = block.get("type")
    if kind == "text":
        text = _convert(block, _Text, where)
        return TextPart(text=text.text, cache_control=_cache(text.cache_control))
    if kind == "image":
        return _image(_convert(block, _Media, where), where)
    if kind == "document":
        return _document(_convert(block, _Media, where), where)
    raise refuse(
        f"{where}.type: a user message may hold text, image, document and tool_result blocks "
        f"through this door, not {kind!r}",
        param=f"{where}.type",
    )


def _image(media: _Media, where: str) -> ImagePart:
    source = media.source
    if source.type == "base64" and source.data is not None:
        return ImagePart(data=source.data, media_type=source.media_type, cache_control=_cache(media.cache_control))
    if source.type == "url" and source.url:
        return ImagePart(url=source.url, cache_control=_cache(media.cache_control))
    raise _unsupported_source(source, where)


def _document(media: _Media, where: str) -> DocumentPart:
    if media.context or (media.citations and media.citations.get("enabled")):
        raise refuse(
            f"{where}: a document's `context` and `citations` have no canonical form, so this door cannot carry them",
            param=where,
        )
    source = media.source
    cache = _cache(media.cache_control)
    if source.type == "base64" and source.data is not None:
        return DocumentPart(data=source.data, media_type=source.media_type, name=media.title, cache_control=cache)
    if source.type == "url" and source.url:
        return DocumentPart(url=source.url, name=media.title, cache_control=cache)
    if source.type == "text" and source.data is not None:
        data = base64.b64encode(source.data.encode()).decode()
        return DocumentPart(data=data, media_type="text/plain", name=media.title, cache_control=cache)
    raise _unsupported_source(source, where)


def _unsupported_source(source: _Source, where: str) -> HttpError:
    why = "a file of the Files API cannot be sent through this door" if source.type == "file" else "unknown"
    return refuse(
        f"{where}.source: {why} (source type {source.type!r}); send base64 data or a URL",
        param=f"{where}.source",
    )


def _tool_result(block: dict[str, Any], where: str) -> ToolResultPart:
    result = _convert(block, _ToolResult, where)
    content: str | list[TextPart | ImagePart]
    if isinstance(result.content, str):
        content = result.content
    else:
        content = []
        for k, item in enumerate(result.content):
            inner = f"{where}.content.{k}"
            kind = item.get("type")
            if kind == "text":
                text = _convert(item, _Text, inner)
                content.append(TextPart(text=text.text, cache_control=_cache(text.cache_control)))
            elif kind == "image":
                content.append(_image(_convert(item, _Media, inner), inner))
            else:
                raise refuse(
                    f"{inner}.type: a tool result may hold text and image blocks through this door, not {kind!r}",
                    param=f"{inner}.type",
                )
    return ToolResultPart(
        tool_call_id=result.tool_use_id,
        content=content,
        is_error=result.is_error,
        cache_control=_cache(result.cache_control),
    )


def _assistant_part(block: dict[str, Any], where: str, target: Target) -> ContentPart:
    kind = block.get("type")
    if kind == "text":
        text = _convert(block, _Text, where)
        return TextPart(text=text.text, cache_control=_cache(text.cache_control))
    if kind == "tool_use":
        use = _convert(block, _ToolUse, where)
        return ToolCallPart(id=use.id, name=use.name, arguments=use.input, cache_control=_cache(use.cache_control))
    if kind == "thinking":
        thinking = _convert(block, _Thinking, where)
        return ThinkingPart(
            text=thinking.thinking, signature=thinking.signature, provider=target.provider, model=target.wire_name
        )
    if kind == "redacted_thinking":
        redacted = _convert(block, _Redacted, where)
        return RedactedThinkingPart(data=redacted.data, provider=target.provider, model=target.wire_name)
    if not isinstance(kind, str) or not kind:
        raise refuse(f"{where}.type: a content block needs a type", param=f"{where}.type")
    if kind in ("image", "document", "tool_result"):
        raise refuse(f"{where}.type: an assistant message cannot hold {kind} blocks", param=f"{where}.type")
    # A server tool's call or result, MCP, compaction...: back verbatim to Anthropic.
    return ProviderPart(api=API, kind=kind, data=block)


def _tools(tools: list[dict[str, Any]], target: Target) -> tuple[list[Tool], bool]:
    """The custom tools, canonical; and whether the list says more than they do (server
    tools, Anthropic-only fields), so an Anthropic provider gets it as sent."""
    out: list[Tool] = []
    verbatim = False
    for k, tool in enumerate(tools):
        where = f"tools.{k}"
        kind = tool.get("type")
        if kind not in (None, "custom"):
            if target.provider_type not in (None, "anthropic"):
                raise refuse(
                    f"{where}: `{kind}` is an Anthropic server tool, which {target.named()} cannot run",
                    param=f"{where}.type",
                )
            verbatim = True
            continue
        t = _convert(tool, _Tool, where)
        verbatim = verbatim or any(name not in _TOOL_FIELDS for name in tool)
        out.append(
            Tool(
                name=t.name,
                description=t.description,
                parameters=t.input_schema,
                strict=t.strict,
                cache_control=_cache(t.cache_control),
            )
        )
    return out, verbatim


def _one_call_at_a_time(options: _Options, target: Target) -> None:
    kind = target.provider_type
    if kind in ("openai", "openai_compat"):
        options.mine()["parallel_tool_calls"] = False
    elif kind not in (None, "mock"):
        raise refuse(
            f"tool_choice.disable_parallel_tool_use: {target.named()} cannot be held to one tool call at a time",
            param="tool_choice.disable_parallel_tool_use",
        )


def effort_for_budget(budget: int) -> ReasoningEffort:
    """The effort a thinking budget stands for: the least whose budget covers it."""
    for limit, effort in BUDGETS:
        if budget <= limit:
            return effort
    return "max"


def nearest_effort(effort: ReasoningEffort, target: Target) -> ReasoningEffort | None:
    """`effort`, or the nearest the model takes (ties: the higher); `none` where reasoning
    cannot be turned off is left out (the model's default)."""
    efforts = target.model.rules.efforts if target.model is not None else None
    if efforts is None or effort in efforts:
        return effort
    if effort == "none":
        return None
    steps = [e for e in efforts if e != "none"]
    if not steps:
        return None
    at = LADDER.index(effort)
    return min(steps, key=lambda e: (abs(LADDER.index(e) - at), -LADDER.index(e)))


def _thinking(request: Request, thinking: dict[str, Any], options: _Options, target: Target) -> None:
    config = _convert(thinking, _ThinkingConfig, "thinking")
    if target.provider_type == "anthropic":
        if config.type in _THINKING_TYPES:
            options.mine()["thinking"] = thinking
        else:
            options.extra_body()["thinking"] = thinking
        return
    if config.type == "enabled":
        if config.budget_tokens is None:
            raise refuse("thinking.budget_tokens: Field required", param="thinking.budget_tokens")
        request.reasoning_effort = nearest_effort(effort_for_budget(config.budget_tokens), target)
    elif config.type == "disabled":
        request.reasoning_effort = nearest_effort("none", target)
    elif config.type != "adaptive":  # adaptive: the model's default, or output_config's effort
        raise refuse(f"thinking.type: {config.type!r} has no canonical form", param="thinking.type")


def _output_config(request: Request, output: dict[str, Any], options: _Options, target: Target) -> None:
    config = _convert(output, _OutputConfig, "output_config")
    if target.provider_type == "anthropic":
        options.mine()["output_config"] = output
        return
    if config.effort is not None:
        request.reasoning_effort = nearest_effort(config.effort, target)
    fmt = config.format
    if fmt is not None:
        if fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
            raise refuse(
                "output_config.format: a `json_schema` format with its `schema` object is required",
                param="output_config.format",
            )
        request.response_format = ResponseFormat(kind="json_schema", schema=fmt["schema"])


def _top_k(top_k: int, options: _Options, target: Target) -> None:
    kind = target.provider_type
    if kind in ("anthropic", "openai_compat"):
        options.mine()["top_k"] = top_k
    elif kind == "gemini":
        mine = options.mine()
        mine["generation_config"] = {**(mine.get("generation_config") or {}), "topK": top_k}
    elif kind == "ollama":
        mine = options.mine()
        mine["options"] = {**(mine.get("options") or {}), "top_k": top_k}
    elif kind == "openai":
        raise refuse(f"top_k: {target.named()} has no top_k sampling", param="top_k")
