"""Checks a request must pass before any provider sees it.

The message rules follow the OpenArmature spec: system (and developer)
messages only at the start, the conversation then opens with the user and
ends with a user or tool message, every tool result answers an earlier tool
call, tool names are unique and of the form every provider accepts, and
required content is present. Then the request is checked against what the
resolved model can do. Each failure is one clear sentence naming the place.
"""

from __future__ import annotations

import re

from ..protocol.messages import (
    AudioPart,
    DocumentPart,
    ErrorClass,
    ImagePart,
    ModelInfo,
    ProviderPart,
    RedactedThinkingPart,
    Request,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)
from ..protocol.tokens import estimate_request_tokens

#: The strictest tool-name form all providers accept (Gemini and OpenAI allow a
#: little more, Anthropic a little less; this is inside all of them).
TOOL_NAME = re.compile(r"[a-zA-Z][a-zA-Z0-9_]{0,63}")

#: An estimate this far over the context window is certainly too long.
CONTEXT_MARGIN = 1.15


class Invalid(Exception):
    def __init__(self, message: str, error_class: ErrorClass = "invalid_request") -> None:
        super().__init__(message)
        self.error_class: ErrorClass = error_class
        self.message = message


def _where(i: int) -> str:
    return f"messages[{i}]"


def check_messages(request: Request) -> None:
    messages = request.messages
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
            _check_user(m.content, where)
        elif m.role == "assistant":
            _check_assistant(m.content, where, seen_calls)
        elif m.role == "tool":
            _check_tool(m, where, seen_calls)
    if not opened:
        raise Invalid("messages holds only system messages: add a user message")
    last = messages[-1]
    if last.role not in ("user", "tool"):
        raise Invalid(f"{_where(len(messages) - 1)}: the last message must be from the user or a tool, not {last.role}")


def _check_user(content: list, where: str) -> None:  # type: ignore[type-arg]
    if not content:
        raise Invalid(f"{where}: a user message needs content")
    has_substance = False
    for j, p in enumerate(content):
        t = type(p)
        if t is TextPart:
            has_substance = has_substance or bool(p.text)
        elif t in (ImagePart, AudioPart, DocumentPart):
            if not (p.url or p.data or p.path):
                raise Invalid(f"{where}.content[{j}]: a {p.__struct_config__.tag} needs a url, data or path")
            if p.data and not p.media_type:
                raise Invalid(f"{where}.content[{j}]: base64 data needs a media_type")
            has_substance = True
        elif t is ToolResultPart:
            raise Invalid(f"{where}.content[{j}]: tool results go in a message with role `tool`")
        else:
            raise Invalid(f"{where}.content[{j}]: a user message cannot hold {p.__struct_config__.tag} parts")
    if not has_substance:
        raise Invalid(f"{where}: a user message needs non-empty content")


def _check_assistant(content: list, where: str, seen_calls: set[str]) -> None:  # type: ignore[type-arg]
    if not content:
        raise Invalid(f"{where}: an assistant message needs content or tool calls")
    has_substance = False
    for j, p in enumerate(content):
        t = type(p)
        if t is TextPart:
            has_substance = has_substance or bool(p.text)
        elif t is ToolCallPart:
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
        elif t in (ThinkingPart, RedactedThinkingPart, ProviderPart):
            has_substance = True
        else:
            raise Invalid(f"{where}.content[{j}]: an assistant message cannot hold {p.__struct_config__.tag} parts")
    if not has_substance:
        raise Invalid(f"{where}: an assistant message needs non-empty text or a tool call")


def _check_tool(m, where: str, seen_calls: set[str]) -> None:  # type: ignore[no-untyped-def]
    results = [p for p in m.content if type(p) is ToolResultPart]
    if not results and not m.tool_call_id:
        raise Invalid(f"{where}: a tool message needs a tool_result part or a tool_call_id")
    for j, p in enumerate(m.content):
        if type(p) not in (ToolResultPart, TextPart, ImagePart):
            raise Invalid(f"{where}.content[{j}]: a tool message cannot hold {p.__struct_config__.tag} parts")
    ids = [p.tool_call_id for p in results] or [m.tool_call_id]
    for call_id in ids:
        if call_id not in seen_calls:
            raise Invalid(f"{where}: tool_call_id {call_id!r} does not answer any earlier tool call")
    if not results and not any(type(p) is TextPart for p in m.content):
        raise Invalid(f"{where}: a tool message needs result content")


def check_tools(request: Request) -> None:
    names: set[str] = set()
    for i, tool in enumerate(request.tools):
        if not TOOL_NAME.fullmatch(tool.name):
            raise Invalid(
                f"tools[{i}]: name {tool.name!r} must match [a-zA-Z][a-zA-Z0-9_]{{0,63}} "
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


def check_settings(request: Request) -> None:
    if request.temperature is not None and not 0.0 <= request.temperature <= 2.0:
        raise Invalid(f"temperature {request.temperature} is outside [0, 2]")
    if request.top_p is not None and not 0.0 < request.top_p <= 1.0:
        raise Invalid(f"top_p {request.top_p} is outside (0, 1]")
    if request.max_tokens is not None and request.max_tokens < 1:
        raise Invalid(f"max_tokens must be at least 1, got {request.max_tokens}")
    if request.max_retries is not None and not 0 <= request.max_retries <= 10:
        raise Invalid(f"max_retries must be within [0, 10], got {request.max_retries}")
    fmt = request.response_format
    if fmt is not None and fmt.kind == "json_schema" and not fmt.schema:
        raise Invalid("response_format json_schema needs a schema")
    if any(not s for s in request.stop_sequences):
        raise Invalid("stop_sequences cannot contain an empty string")


def check_capabilities(request: Request, model: ModelInfo, stream: bool) -> None:
    if not model.in_catalog:
        return  # the catalog does not know it: the provider decides
    name = model.id
    if request.tools and not model.tools:
        raise Invalid(f"model {name} does not support tools")
    if stream and not model.streaming:
        raise Invalid(f"model {name} does not support streaming; submit with stream=false")
    fmt = request.response_format
    if fmt is not None and fmt.kind == "json_schema" and not model.structured_output:
        raise Invalid(f"model {name} does not support structured output (response_format json_schema)")
    if not model.vision:
        for i, m in enumerate(request.messages):
            for j, p in enumerate(m.content):
                inner = p.content if type(p) is ToolResultPart and not isinstance(p.content, str) else [p]
                for q in inner:
                    if type(q) in (ImagePart, DocumentPart):
                        raise Invalid(f"{_where(i)}.content[{j}]: model {name} does not accept images or documents")
    most = model.rules.max_output_total or model.max_output
    if most is not None and request.max_tokens is not None and request.max_tokens > most:
        raise Invalid(f"max_tokens {request.max_tokens} exceeds the {most} output tokens of {name}")
    if model.context_window and _upper_bound_tokens(request) > model.context_window * CONTEXT_MARGIN:
        estimate = estimate_request_tokens(request)
        if estimate > model.context_window * CONTEXT_MARGIN:
            raise Invalid(
                f"the prompt is about {estimate} tokens, over the {model.context_window}-token context of {name}",
                "context_length",
            )


def _upper_bound_tokens(request: Request) -> int:
    """A cheap bound (a token is at least one character) so the real estimate,
    which costs time on the submit path, runs only for prompts that may be too long."""
    size = 0
    for m in request.messages:
        for p in m.content:
            t = type(p)
            if t is TextPart or t is ThinkingPart:
                size += len(p.text) + 4  # type: ignore[union-attr]
            elif t is ToolResultPart:
                size += len(p.content) if isinstance(p.content, str) else 4000  # type: ignore[union-attr]
            else:
                size += 4000
    return size + sum(len(str(t.parameters)) + len(t.description) for t in request.tools)


def validate(request: Request, model: ModelInfo, stream: bool) -> None:
    """Raise `Invalid` at the first rule `request` breaks."""
    check_messages(request)
    check_tools(request)
    check_settings(request)
    check_capabilities(request, model, stream)
