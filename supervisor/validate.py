"""Checks a request must pass before any provider sees it.

The message rules follow the OpenArmature spec: system (and developer)
messages only at the start, the conversation then opens with the user and
ends with a user or tool message, every tool result answers an earlier tool
call, tool names are unique and of the form every provider accepts, and
required content is present. Every number is finite and within its range
(the worker's deadlines and the mock's scripts included), media parts carry
well-formed URLs or base64 of an accepted media type, and never a local path:
the daemon does not open files a client names. Then the request is checked
against what the resolved model can do (its `capabilities`: the catalog's flags
met with what its provider's implementation carries), so nothing it cannot
take is dropped by a worker from a call that is still made and billed. A
conversation may end with an assistant message only where the model takes a
prefill (the answer continues it) under the provider's rules for one. Each
failure is one clear sentence naming the place.
"""

from __future__ import annotations

import math
import re
import string
from typing import Any
from urllib.parse import urlsplit

import msgspec

from ..config.capabilities import NAMES, provider_types_with
from ..config.rules import effort_refusal, forced_tool_refusal
from ..protocol import provider_options
from ..protocol.limits import request_problem
from ..protocol.messages import (
    AudioPart,
    Capabilities,
    ContentPart,
    DocumentPart,
    ErrorClass,
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
)
from ..protocol.tokens import estimate_request_tokens, provider_part_chars

#: The intersection of the providers' own tool-name rules (Anthropic, OpenAI and
#: Gemini all take letters, digits, `_` and `-`, up to 64 characters; Gemini wants a
#: letter or underscore first).
TOOL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_-]{0,63}")

#: An estimate this far over the context window is certainly too long.
CONTEXT_MARGIN = 1.15

#: Ranges of the request's own numbers.
MAX_TOKENS = 2**31 - 1  # the widest any provider takes (a signed 32-bit count)
SEED_RANGE = (-(2**63), 2**63 - 1)
MAX_TIMEOUT_S = 86_400.0

#: Media a part may carry, by part kind (what the providers we speak to accept).
MEDIA_TYPES: dict[str, frozenset[str]] = {
    "image": frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"}),
    "document": frozenset({"application/pdf", "text/plain", "text/markdown", "text/csv", "text/html"}),
    "audio": frozenset(
        {
            "audio/wav",
            "audio/x-wav",
            "audio/mpeg",
            "audio/mp3",
            "audio/ogg",
            "audio/flac",
            "audio/webm",
            "audio/mp4",
            "audio/aac",
        }
    ),
}
URL_SCHEMES = ("https", "http", "data")
#: Bytes one media part may decode to (Anthropic's request limit, the largest we know
#: of); the message size limit (16 MiB by default) usually binds first.
MAX_MEDIA_BYTES = 32 * 1024 * 1024
#: A web URL longer than this is refused (data: URLs are bounded by MAX_MEDIA_BYTES).
MAX_URL_CHARS = 8192
_BASE64 = (string.ascii_letters + string.digits + "+/").encode()
_URL_FORBIDDEN = re.compile(r"[\x00-\x20\x7f]")


class Invalid(Exception):
    """A request refused before any call. `capability` names what the model lacks when
    that is the reason (the supervisor logs those: a client asking a model for what it
    cannot do is worth an operator's notice)."""

    def __init__(
        self, message: str, error_class: ErrorClass = "invalid_request", capability: str | None = None
    ) -> None:
        super().__init__(message)
        self.error_class: ErrorClass = error_class
        self.message = message
        self.capability = capability


def _lacks(model: ModelInfo, capability: str, where: str = "", how: str = "") -> Invalid:
    """The refusal of a request that uses `capability`, which `model` lacks."""
    place = f"{where}: " if where else ""
    what = NAMES[capability]
    verb = "accept" if capability in ("vision", "documents", "audio") else "support"
    return Invalid(
        f"{place}model {model.id} does not {verb} {what} (capability `{capability}`){how}", capability=capability
    )


#: The media kinds refused, by which of (vision, documents, audio) a model has: worked
#: out once, as this runs for every submit.
_REFUSED: dict[tuple[bool, bool, bool], dict[type, str]] = {
    (vision, documents, audio): {
        kind: name
        for kind, name, has in (
            (ImagePart, "vision", vision),
            (DocumentPart, "documents", documents),
            (AudioPart, "audio", audio),
        )
        if not has
    }
    for vision in (False, True)
    for documents in (False, True)
    for audio in (False, True)
}
_NONE: dict[type, str] = {}
#: A catalog model without declared capabilities: its `vision` flag covers documents too.
_BY_FLAGS: dict[type, str] = {ImagePart: "vision", DocumentPart: "vision"}


def unreadable(model: ModelInfo | None) -> dict[type, str]:
    """The media part kinds `model` cannot read, each with the capability it lacks. A
    model without declared capabilities is checked on its catalog flags alone (and one
    the catalog does not list, not at all: the provider decides)."""
    if model is None:
        return {}
    caps = model.capabilities
    if caps is None:
        return _NONE if model.in_catalog is False or model.vision else _BY_FLAGS
    return _REFUSED[caps.vision, caps.documents, caps.audio]


def _where(i: int) -> str:
    return f"messages[{i}]"


def check_messages(request: Request, model: ModelInfo | None = None, provider_type: str | None = None) -> None:
    """The conversation's shape and parts; with `model`, also the media it cannot read
    and whether it may end with an assistant message (a prefill)."""
    messages = request.messages
    refused = unreadable(model)
    if not messages:
        raise Invalid("messages is empty: a request needs at least one user message")
    seen_calls: set[str] = set()
    opened = False
    for i, m in enumerate(messages):
        where = _where(i)
        if m.role in ("system", "developer"):
            if opened:
                raise Invalid(f"{where}: a {m.role} message may only come before the conversation starts")
            if not m.content or not any(type(p) is TextPart and p.text for p in m.content):
                raise Invalid(f"{where}: a {m.role} message needs non-empty text")
            for j, p in enumerate(m.content):
                if type(p) is not TextPart:
                    raise Invalid(f"{where}.content[{j}]: a {m.role} message may only hold text")
            continue
        if not opened:
            opened = True
            if m.role != "user":
                raise Invalid(f"{where}: the conversation must start with a user message, not {m.role}")
        if m.role == "user":
            _check_user(m.content, where, refused, model)
        elif m.role == "assistant":
            _check_assistant(m.content, where, seen_calls)
        elif m.role == "tool":
            _check_tool(m, where, seen_calls, refused, model)
    if not opened:
        raise Invalid("messages holds only system messages: add a user message")
    last = messages[-1]
    paused = last.role == "assistant" and any(type(p) is ProviderPart for p in last.content)
    # A turn the provider paused (Anthropic's `pause_turn`, mid server tool) is continued by
    # sending it back as it came, so it may end the conversation; any other assistant turn
    # there is a prefill, which only a model that takes one may be sent.
    if last.role not in ("user", "tool") and not paused:
        where = _where(len(messages) - 1)
        caps = model.capabilities if model is not None else None
        if caps is None or not caps.prefill:
            raise Invalid(
                f"{where}: the last message must be from the user or a tool, not {last.role}{_prefill_note(model)}",
                capability="prefill" if model is not None else None,
            )
        assert model is not None  # caps came from it
        check_prefill(request, model, provider_type or model.provider)


# The checks below test a part's class with isinstance, not `match`: they run for every
# part of every submit, and a class pattern costs more.


def _check_user(
    content: list[ContentPart], where: str, refused: dict[type, str], model: ModelInfo | None = None
) -> None:
    if not content:
        raise Invalid(f"{where}: a user message needs content")
    has_substance = False
    for j, p in enumerate(content):
        if isinstance(p, TextPart):
            has_substance = has_substance or bool(p.text)
        elif isinstance(p, (ImagePart, AudioPart, DocumentPart)):
            check_media(p, f"{where}.content[{j}]")
            if refused and type(p) in refused:
                raise _cannot_read(model, refused[type(p)], f"{where}.content[{j}]")
            has_substance = True
        elif isinstance(p, ToolResultPart):
            raise Invalid(f"{where}.content[{j}]: tool results go in a message with role `tool`")
        else:
            raise Invalid(f"{where}.content[{j}]: a user message cannot hold {p.__struct_config__.tag} parts")
    if not has_substance:
        raise Invalid(f"{where}: a user message needs non-empty content")


def _check_assistant(content: list[ContentPart], where: str, seen_calls: set[str]) -> None:
    if not content:
        raise Invalid(f"{where}: an assistant message needs content or tool calls")
    has_substance = False
    for j, p in enumerate(content):
        if isinstance(p, TextPart):
            has_substance = has_substance or bool(p.text)
        elif isinstance(p, ToolCallPart):
            if not p.id:
                raise Invalid(f"{where}.content[{j}]: a tool call needs an id")
            if not p.name:
                raise Invalid(f"{where}.content[{j}]: a tool call needs a name")
            if p.id in seen_calls:
                raise Invalid(f"{where}.content[{j}]: tool call id {p.id!r} is used twice")
            seen_calls.add(p.id)
            if p.provider_id:
                seen_calls.add(p.provider_id)
            has_substance = True
        elif isinstance(p, (ThinkingPart, RedactedThinkingPart, ProviderPart)):
            has_substance = True
        else:
            raise Invalid(f"{where}.content[{j}]: an assistant message cannot hold {p.__struct_config__.tag} parts")
    if not has_substance:
        raise Invalid(f"{where}: an assistant message needs non-empty text or a tool call")


def _check_tool(
    m: Message, where: str, seen_calls: set[str], refused: dict[type, str], model: ModelInfo | None = None
) -> None:
    results = [p for p in m.content if isinstance(p, ToolResultPart)]
    if not results and not m.tool_call_id:
        raise Invalid(f"{where}: a tool message needs a tool_result part or a tool_call_id")
    for j, p in enumerate(m.content):
        if isinstance(p, ImagePart):
            check_media(p, f"{where}.content[{j}]")
            if ImagePart in refused:
                raise _cannot_read(model, refused[ImagePart], f"{where}.content[{j}]")
        elif isinstance(p, ToolResultPart):
            if not isinstance(p.content, str):
                for k, q in enumerate(p.content):
                    if isinstance(q, ImagePart):
                        check_media(q, f"{where}.content[{j}].content[{k}]")
                        if ImagePart in refused:
                            raise _cannot_read(model, refused[ImagePart], f"{where}.content[{j}].content[{k}]")
        elif not isinstance(p, TextPart):
            raise Invalid(f"{where}.content[{j}]: a tool message cannot hold {p.__struct_config__.tag} parts")
    ids = [p.tool_call_id for p in results] if results else [m.tool_call_id]
    for call_id in ids:
        if call_id not in seen_calls:
            raise Invalid(f"{where}: tool_call_id {call_id!r} does not answer any earlier tool call")
    if not results and not any(isinstance(p, TextPart) for p in m.content):
        raise Invalid(f"{where}: a tool message needs result content")


def _cannot_read(model: ModelInfo | None, capability: str, where: str) -> Invalid:
    assert model is not None  # only a model's capabilities refuse a part
    if capability == "vision" and model.capabilities is None:  # the catalog's flag covers both
        return Invalid(f"{where}: model {model.id} does not accept images or documents", capability="vision")
    return _lacks(model, capability, where, "; nothing was sent")


def _prefill_note(model: ModelInfo | None) -> str:
    """What to say of a prefill to a model that does not take one."""
    if model is None:
        return ""
    takers = ", ".join(provider_types_with("prefill"))
    if model.capabilities is not None and model.rules.prefill is False:
        source = model.rules.sources.get("prefill")
        return (
            f" ({model.id} does not take a prefill, a last assistant message the answer continues"
            f"{f': {source}' if source else ''})"
        )
    return f" (a prefill, a last assistant message the answer continues, is taken only by {takers} models)"


def check_prefill(request: Request, model: ModelInfo, provider_type: str) -> None:
    """A conversation ending with an assistant message whose text the answer continues:
    Anthropic's rules for one, refused here rather than by the provider after a call."""
    where = _where(len(request.messages) - 1)
    last = request.messages[-1]
    for j, p in enumerate(last.content):
        if not isinstance(p, TextPart):
            raise Invalid(
                f"{where}.content[{j}]: a prefill (a last assistant message) holds only text, not "
                f"{p.__struct_config__.tag} parts"
            )
    text = "".join(p.text for p in last.content if isinstance(p, TextPart))
    if text != text.rstrip():
        raise Invalid(f"{where}: a prefill may not end with whitespace (the provider refuses it); strip it")
    if _thinking_on(request, model, provider_type):
        raise Invalid(
            f"{where}: a prefill cannot be used while {model.id} thinks (extended thinking); set reasoning_effort "
            "`none` or end the conversation with a user message"
        )
    fmt = request.response_format
    if fmt is not None and fmt.kind == "json_schema":
        raise Invalid(f"{where}: a prefill cannot be used with structured output (response_format json_schema)")


def _thinking_on(request: Request, model: ModelInfo, provider_type: str) -> bool:
    """Whether `model` will think on this request: asked to, by default, or by the
    provider's own `thinking` option."""
    rules = model.rules
    options = request.provider_options.get(model.provider) or request.provider_options.get(provider_type) or {}
    thinking = options.get("thinking")
    if isinstance(thinking, dict) and "type" in thinking:
        return thinking.get("type") != "disabled" or rules.thinking_always_on
    effort = request.reasoning_effort
    if rules.thinking_always_on:
        return True
    if effort is None:
        return rules.thinking_default_on
    return effort != "none" and model.reasoning


def check_media(part: ImagePart | AudioPart | DocumentPart, where: str) -> None:
    """A media part: base64 `data` or a URL, never a local path, of an accepted type."""
    kind = str(part.__struct_config__.tag)
    if part.path is not None:
        raise Invalid(
            f"{where}: the daemon does not read local files (path {part.path[:200]!r}); send the bytes as "
            "base64 `data` instead (the Python client does this for `path` parts)"
        )
    if not (part.url or part.data):
        raise Invalid(f"{where}: {_article(kind)} needs a url or base64 data")
    if part.url and part.data:
        raise Invalid(f"{where}: {_article(kind)} takes a url or base64 data, not both")
    if part.media_type is not None:
        _check_media_type(part.media_type, kind, f"{where}.media_type")
    if part.data:
        if not part.media_type:
            raise Invalid(f"{where}: base64 data needs a media_type")
        _check_base64(part.data, f"{where}.data")
    elif part.url:
        _check_url(part.url, kind, f"{where}.url")


def _article(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _check_media_type(media_type: str, kind: str, where: str) -> None:
    accepted = MEDIA_TYPES[kind]
    if media_type.lower() not in accepted:
        raise Invalid(
            f"{where}: {media_type[:100]!r} is not an accepted {kind} type (one of {', '.join(sorted(accepted))})"
        )


def _check_base64(data: str, where: str) -> None:
    # One C-speed pass (translate), not a decode: a full 16 MiB part costs ~15 ms, a decode 50.
    if not data.isascii():
        raise Invalid(f"{where}: not base64 (a character outside A-Z a-z 0-9 + /)")
    raw = data.encode()
    body = raw.rstrip(b"=")
    if len(raw) % 4 or len(raw) - len(body) > 2 or body.translate(None, _BASE64):
        raise Invalid(f"{where}: not valid base64 (standard alphabet, padded to a multiple of 4 characters)")
    size = len(raw) // 4 * 3 - (len(raw) - len(body))
    if size > MAX_MEDIA_BYTES:
        raise Invalid(f"{where}: {size} bytes, over the {MAX_MEDIA_BYTES}-byte limit of a media part")


def _check_url(url: str, kind: str, where: str) -> None:
    scheme = url.partition(":")[0].lower()
    if scheme not in URL_SCHEMES or ":" not in url:
        raise Invalid(f"{where}: only https, http and data: URLs are accepted, not {url[:40]!r}")
    if scheme == "data":
        head, comma, payload = url.partition(",")
        media_type, _, encoding = head[5:].partition(";")
        if not comma or encoding.lower() != "base64":
            raise Invalid(f"{where}: a data: URL must be data:<media type>;base64,<data>")
        _check_media_type(media_type, kind, where)
        _check_base64(payload, where)
        return
    if len(url) > MAX_URL_CHARS:
        raise Invalid(f"{where}: a URL of {len(url)} characters, over the limit of {MAX_URL_CHARS}")
    if _URL_FORBIDDEN.search(url) or not url.isascii():
        raise Invalid(f"{where}: a URL may not hold spaces, control or non-ASCII characters (percent-encode them)")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError as exc:
        raise Invalid(f"{where}: malformed URL ({exc})") from None
    if not parts.hostname:
        raise Invalid(f"{where}: the URL has no host")


def check_tools(request: Request) -> None:
    names: set[str] = set()
    for i, tool in enumerate(request.tools):
        if not TOOL_NAME.fullmatch(tool.name):
            raise Invalid(
                f"tools[{i}]: name {tool.name!r} must match ^[a-zA-Z_][a-zA-Z0-9_-]{{0,63}}$ "
                "(the form every provider accepts)"
            )
        if tool.name in names:
            raise Invalid(f"tools[{i}]: duplicate tool name {tool.name!r}")
        names.add(tool.name)
        if tool.parameters.get("type", "object") != "object":
            raise Invalid(f"tools[{i}]: parameters must be a JSON Schema of type object")
    choice = request.tool_choice
    if choice is not None:
        if choice.mode in ("required", "tool") and not request.tools:
            raise Invalid(f"tool_choice {choice.mode!r} needs at least one tool")
        if choice.mode == "tool":
            if not choice.name:
                raise Invalid("tool_choice `tool` needs a name")
            if choice.name not in names:
                raise Invalid(f"tool_choice names {choice.name!r}, which is not among the tools")


def _number(value: Any, where: str, low: float, high: float, *, integer: bool = False, low_open: bool = False) -> None:
    if integer:
        if type(value) is not int:
            raise Invalid(f"{where} must be an integer, got {_shown(value)}")
    elif type(value) not in (int, float):
        raise Invalid(f"{where} must be a number, got {_shown(value)}")
    elif not math.isfinite(value):
        raise Invalid(f"{where} must be a finite number, got {value}")
    if value < low or (low_open and value == low) or value > high:
        opening = "(" if low_open else "["
        raise Invalid(f"{where} {value} is outside {opening}{_bound(low)}, {_bound(high)}]")


def _bound(x: float) -> str:
    return str(x) if type(x) is int else f"{x:g}"


def _shown(value: Any) -> str:
    return "null" if value is None else f"a {type(value).__name__}"


def check_settings(request: Request) -> None:
    if request.temperature is not None:
        _number(request.temperature, "temperature", 0.0, 2.0)
    if request.top_p is not None:
        _number(request.top_p, "top_p", 0.0, 1.0, low_open=True)
    if request.max_tokens is not None:
        _number(request.max_tokens, "max_tokens", 1, MAX_TOKENS, integer=True)
    if request.seed is not None:
        _number(request.seed, "seed", *SEED_RANGE, integer=True)
    if request.max_retries is not None:
        _number(request.max_retries, "max_retries", 0, 10, integer=True)
    if request.timeouts is not None:
        for name in ("connect_s", "request_s", "stream_idle_s"):
            value = getattr(request.timeouts, name)
            if value is not None:
                _number(value, f"timeouts.{name}", 0.0, MAX_TIMEOUT_S, low_open=True)
    problem = request_problem(request, numbers=True)
    if problem is not None:
        raise Invalid(problem)
    fmt = request.response_format
    if fmt is not None and fmt.kind == "json_schema" and not fmt.schema:
        raise Invalid("response_format json_schema needs a schema")
    if any(not s for s in request.stop_sequences):
        raise Invalid("stop_sequences cannot contain an empty string")


def check_provider_options(request: Request, provider: str, provider_type: str) -> None:
    """The options the worker of `provider` will read (by its name, else by its type, as
    the workers look them up), checked against the provider type's schema
    (`protocol/provider_options.py`, which the workers read too)."""
    if not request.provider_options:
        return
    key = provider if request.provider_options.get(provider) else provider_type
    options = request.provider_options.get(key)
    if options is None or options == {}:
        return
    try:
        provider_options.check(provider_type, options, f"provider_options.{key}")
    except provider_options.OptionsError as exc:
        raise Invalid(str(exc)) from None


def check_capabilities(request: Request, model: ModelInfo, stream: bool) -> None:
    """What the request asks of the model against what it can do (media parts are
    checked as the messages are walked, by `check_messages`). A model without declared
    capabilities is checked on its catalog flags, and one the catalog does not list
    only on its capabilities (its flags allow everything: the provider decides)."""
    caps = model.capabilities
    if caps is None:
        if not model.in_catalog:
            return
        caps = Capabilities(tools=model.tools, streaming=model.streaming, structured_output=model.structured_output)
    if request.tools and not caps.tools:
        raise _lacks(model, "tools")
    if stream and not caps.streaming:
        raise _lacks(model, "streaming", how="; submit with stream=false")
    fmt = request.response_format
    if fmt is not None and fmt.kind == "json_schema" and not caps.structured_output:
        raise _lacks(model, "structured_output", how=" (response_format json_schema)")
    if not model.in_catalog:
        return  # the catalog knows no limits of it
    name = model.id
    most = model.rules.max_output_total or model.max_output
    if most is not None and request.max_tokens is not None and request.max_tokens > most:
        raise Invalid(f"max_tokens {request.max_tokens} exceeds the {most} output tokens of {name}")
    limit = min(filter(None, (model.context_window, model.rules.max_input_tokens)), default=None)
    if limit and _upper_bound_tokens(request) > limit * CONTEXT_MARGIN:
        estimate = estimate_request_tokens(_since_compaction(request))
        if estimate > limit * CONTEXT_MARGIN:
            what = "context" if limit == model.context_window else "input limit"
            raise Invalid(
                f"the prompt is about {estimate} tokens, over the {limit}-token {what} of {name}", "context_length"
            )


def check_rules(request: Request, model: ModelInfo) -> None:
    """What the model's catalog rules say it cannot serve at all (what it merely does not
    take, the translators leave out with a warning)."""
    for problem in (effort_refusal(request, model), forced_tool_refusal(request, model)):
        if problem:
            raise Invalid(problem)


def _since_compaction(request: Request) -> Request:
    """What the model will read: a provider's compaction part stands for everything
    before it (the provider drops those turns), so a compacted history longer than
    the context is not refused for its old turns."""
    last = max(
        (
            i
            for i, m in enumerate(request.messages)
            if any(type(p) is ProviderPart and p.kind == "compaction" for p in m.content)
        ),
        default=None,
    )
    if last is None:
        return request
    kept = [m for m in request.messages[:last] if m.role in ("system", "developer")] + request.messages[last:]
    return msgspec.structs.replace(request, messages=kept)


def _upper_bound_tokens(request: Request) -> int:
    """A cheap bound (a token is at least one character) so the real estimate,
    which costs time on the submit path, runs only for prompts that may be too long."""
    size = 0
    for m in request.messages:
        for p in m.content:
            if isinstance(p, (TextPart, ThinkingPart)):
                size += len(p.text) + 4
            elif isinstance(p, ToolResultPart):
                size += len(p.content) if isinstance(p.content, str) else 4000
            elif isinstance(p, ProviderPart):
                size += provider_part_chars(p)
            else:
                size += 4000
    # The JSON form's length bounds a schema's tokens; str() of a big dict costs 40 times more.
    return size + sum(len(msgspec.json.encode(t.parameters)) + len(t.description) for t in request.tools)


def validate(request: Request, model: ModelInfo, stream: bool, provider_type: str | None = None) -> None:
    """Raise `Invalid` at the first rule `request` breaks. `provider_type` (the type of
    the provider `model` resolved to) selects which provider options are checked."""
    check_messages(request, model, provider_type)
    check_tools(request)
    check_settings(request)
    check_provider_options(request, model.provider, provider_type or model.provider)
    check_capabilities(request, model, stream)
    check_rules(request, model)
