"""A Responses API request body -> the canonical `Request`. Pure.

What each field becomes (the tests hold each one):

* `instructions`, and `system`/`developer` messages wherever they stand in `input`,
  lead the conversation in order: the canonical form keeps instructions first, as
  the OpenAI worker does when it joins them into `instructions`;
* `input` as a string is one user message; as items: messages (the easy form
  without `type` too) with `input_text`/`input_image`/`input_file` parts (an
  assistant's `output_text` and `refusal` as text), `function_call` items (their
  `call_id` is the canonical call id the door gave out), `function_call_output`
  items (one tool message each), `reasoning` items (opened by
  `openai_responses_carrier`), and any other item type a conversation begun at
  OpenAI holds (web search calls, compaction...) as OpenAI's own opaque part,
  which the OpenAI worker sends back as it is and other workers drop with a warning;
  consecutive model-side items make one assistant message;
* function `tools`, `tool_choice` (`auto`, `none`, `required`, a function, or
  `allowed_tools`, which narrows the tools), `text.format`, `max_output_tokens`,
  `temperature`, `top_p`, `reasoning.effort`, `metadata` map to their canonical
  fields; `reasoning.summary`, `service_tier`, `prompt_cache_key` and OpenAI's
  other settings of its own are carried in `provider_options.openai`, which OpenAI
  models read and others ignore (so is `text` whole when it sets `verbosity`);
* `store` is accepted and nothing is stored; `previous_response_id`,
  `conversation`, `prompt`, `item_reference` items and `file_id`s point at what
  OpenAI stores, and are refused with a sentence saying what to send instead;
  OpenAI's built-in tools run at OpenAI and are refused, naming the way to send
  them to an OpenAI model (`provider_options.openai.tools`); any other field is
  refused by name.
"""

from __future__ import annotations

import mimetypes
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from ..protocol.accumulate import parse_arguments
from ..protocol.messages import (
    ContentPart,
    DocumentPart,
    ImagePart,
    Message,
    ProviderPart,
    ReasoningEffort,
    Request,
    ResponseFormat,
    TextPart,
    ThinkingPart,
    Tool,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
)
from . import openai_responses_carrier as carrier
from .errors import HttpError, refuse

#: The `api` of OpenAI's opaque parts (the OpenAI worker's own).
OPENAI = "openai"

_Summary = Literal["auto", "concise", "detailed"]


class _Strict(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    pass


class _Reasoning(_Strict):
    effort: ReasoningEffort | None = None
    summary: _Summary | None = None
    generate_summary: _Summary | None = None  # the deprecated spelling of `summary`


class _FormatText(_Strict, tag="text", tag_field="type"):
    pass


class _FormatJsonObject(_Strict, tag="json_object", tag_field="type"):
    pass


class _FormatJsonSchema(_Strict, tag="json_schema", tag_field="type"):
    schema: dict[str, Any]
    name: str = "response"
    strict: bool | None = None
    description: str | None = None


class _Text(_Strict):
    format: _FormatText | _FormatJsonObject | _FormatJsonSchema | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class _StreamOptions(_Strict):
    include_obfuscation: bool | None = None  # no padding is sent either way


class Body(msgspec.Struct, kw_only=True):
    """The fields the door reads, typed; null is the same as left out."""

    model: str
    input: str | list[Any]
    instructions: str | None = None
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: _Text | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    reasoning: _Reasoning | None = None
    metadata: dict[str, str] | None = None
    stream: bool | None = None
    store: bool | None = None
    include: list[str] | None = None
    background: bool | None = None
    stream_options: _StreamOptions | None = None
    top_logprobs: int | None = None
    previous_response_id: str | None = None
    provider_options: dict[str, dict[str, Any]] | None = None  # trunkline's own (an SDK's extra_body)
    # OpenAI's settings of its own, carried to OpenAI models as they are.
    service_tier: str | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    truncation: Literal["auto", "disabled"] | None = None
    max_tool_calls: int | None = None


_KNOWN = frozenset(Body.__struct_fields__)
_CARRIED = ("service_tier", "user", "safety_identifier", "prompt_cache_key", "prompt_cache_retention", "max_tool_calls")
#: Fields that name something OpenAI keeps between calls: the door keeps nothing.
_STORED = {
    "conversation": "a conversation stored at OpenAI",
    "prompt": "a prompt template stored at OpenAI",
}
_ROLES = ("user", "assistant", "system", "developer")
_DETAILS = ("auto", "low", "high")
_MODES: dict[str, Literal["auto", "none", "required"]] = {"auto": "auto", "none": "none", "required": "required"}


@dataclass
class Translated:
    """The canonical request, and what the response echoes of the body."""

    request: Request
    stream: bool
    echo: dict[str, Any] = field(default_factory=dict)


def translate(raw: Any) -> Translated:
    if not isinstance(raw, dict):
        raise refuse("the request body must be a JSON object")
    _refuse_unknown(raw)
    try:
        body = msgspec.convert(raw, Body)
    except msgspec.ValidationError as exc:
        raise refuse(f"the request body does not fit the Responses API: {exc}", param=_param_of(exc)) from None
    if body.previous_response_id is not None:
        raise refuse(
            "previous_response_id refers to a response stored at OpenAI, and the front door stores none: "
            "send the whole conversation as `input` (the items of the earlier response's `output` included)",
            param="previous_response_id",
        )
    if body.background and not body.stream:
        raise refuse(
            "a background response is fetched later by its id, and the front door keeps no responses: "
            "stream it instead (stream: true)",
            param="background",
        )
    if body.top_logprobs:
        raise refuse("the front door returns no log probabilities (top_logprobs)", param="top_logprobs")
    carried: dict[str, Any] = {}
    request = Request(model=body.model, messages=_conversation(body))
    if body.tools:
        request.tools = [_tool(t, i) for i, t in enumerate(body.tools)]
    request.tool_choice, request.tools = _tool_choice(body.tool_choice, request.tools)
    if body.parallel_tool_calls is False:
        carried["parallel_tool_calls"] = False
    if body.text is not None:
        request.response_format = _format(body.text.format)
        if body.text.verbosity is not None or (
            isinstance(body.text.format, _FormatJsonSchema) and body.text.format.description
        ):
            carried["text"] = raw["text"]  # as OpenAI takes it: the format as the client wrote it
    request.max_tokens = body.max_output_tokens
    request.temperature = body.temperature
    request.top_p = body.top_p
    if body.reasoning is not None:
        request.reasoning_effort = body.reasoning.effort
        summary = body.reasoning.summary or body.reasoning.generate_summary
        if summary is not None:
            carried["reasoning_summary"] = summary
    if body.metadata:
        request.metadata = body.metadata
    for value in body.include or ():
        if value != "reasoning.encrypted_content":  # always given: reasoning comes back only through it
            raise refuse(
                f"include {value!r} is not taken: the front door runs none of OpenAI's built-in tools and returns "
                "no log probabilities (it always returns reasoning.encrypted_content); to ask an OpenAI model for "
                "it, give it in provider_options.openai.include",
                param="include",
            )
    if body.background:
        carried["background"] = True  # the OpenAI worker resumes a dropped stream
    if body.truncation == "auto":
        carried["truncation"] = "auto"
    for name in _CARRIED:
        value = getattr(body, name)
        if value is not None:
            carried[name] = value
    request.provider_options = _options(body.provider_options, carried)
    return Translated(request, bool(body.stream), _echo(body))


def _refuse_unknown(raw: dict[str, Any]) -> None:
    for name in raw:
        if name in _KNOWN:
            continue
        if name in _STORED and raw[name] is not None:
            raise refuse(
                f"`{name}` refers to {_STORED[name]}, and the front door stores nothing: "
                "send the conversation as `input` and the instructions as `instructions`",
                param=name,
            )
        if name not in _STORED:
            raise refuse(
                f"`{name}` is not taken by the front door; to send it to an OpenAI model as it is, "
                f"give it in provider_options.openai.extra_body",
                param=name,
            )


def _param_of(exc: msgspec.ValidationError) -> str | None:
    # msgspec ends its message with the path: "... - at `$.text.format`".
    _, marker, path = str(exc).rpartition(" - at `$")
    if not marker:
        return None
    return path.rstrip("`").lstrip(".") or None


# -- the conversation --------------------------------------------------------------


def _conversation(body: Body) -> list[Message]:
    leading: list[Message] = []
    if body.instructions:
        leading.append(Message(role="system", content=[TextPart(text=body.instructions)]))
    if isinstance(body.input, str):
        return [*leading, Message(role="user", content=[TextPart(text=body.input)])]
    turns = _Turns()
    for i, item in enumerate(body.input):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise refuse(f"{where} must be an object (a message or another input item)", param=where)
        kind = item.get("type")
        if kind is None or kind == "message":
            role = item.get("role")
            if role not in _ROLES:
                raise refuse(f"{where}.role must be one of {', '.join(_ROLES)}", param=f"{where}.role")
            content = _content(item.get("content"), f"{where}.content")
            if role in ("system", "developer"):
                leading.append(Message(role=role, content=content))
            elif role == "user":
                turns.user(content)
            else:
                phase = item.get("phase")
                if phase is not None:
                    # Kept as the OpenAI worker keeps it: the marker before the message's text.
                    turns.model_side(
                        [ProviderPart(api=OPENAI, kind="message", data={"type": "message", "phase": phase})]
                    )
                turns.model_side(content)
        elif kind == "function_call":
            turns.model_side([_call(item, where)])
        elif kind == "function_call_output":
            turns.tool(_result(item, where))
        elif kind == "reasoning":
            turns.model_side(_reasoning(item, where))
        elif kind == "item_reference":
            raise refuse(
                f"{where} refers to an item stored at OpenAI, and the front door stores none: send the item itself",
                param=where,
            )
        elif isinstance(kind, str):
            turns.model_side([ProviderPart(api=OPENAI, kind=kind, data=item)])
        else:
            raise refuse(f"{where}.type must be a string", param=f"{where}.type")
    return [*leading, *turns.messages]


class _Turns:
    """Messages in order; consecutive model-side items make one assistant message."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    def user(self, content: list[ContentPart]) -> None:
        self.messages.append(Message(role="user", content=content))

    def tool(self, result: ToolResultPart) -> None:
        self.messages.append(Message(role="tool", content=[result]))

    def model_side(self, parts: list[ContentPart]) -> None:
        if not parts:
            return
        if self.messages and self.messages[-1].role == "assistant":
            self.messages[-1].content.extend(parts)
        else:
            self.messages.append(Message(role="assistant", content=list(parts)))


def _text_of(part: dict[str, Any], key: str, where: str) -> str:
    text = part.get(key)
    if not isinstance(text, str):
        raise refuse(f"{where}.{key} must be a string", param=f"{where}.{key}")
    return text


def _content(content: Any, where: str) -> list[ContentPart]:
    if isinstance(content, str):
        return [TextPart(text=content)]
    if not isinstance(content, list):
        raise refuse(f"{where} must be a string or a list of content parts", param=where)
    out: list[ContentPart] = []
    for j, part in enumerate(content):
        at = f"{where}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text"):
            out.append(TextPart(text=_text_of(part, "text", at)))
        elif kind == "refusal":
            out.append(TextPart(text=_text_of(part, "refusal", at)))
        elif kind == "input_image":
            out.append(_image(part, at))
        elif kind == "input_file":
            out.append(_file(part, at))
        else:
            raise refuse(
                f"{at}: a content part of type {kind!r} is not taken (input_text, input_image, input_file; "
                "output_text and refusal in an assistant message)",
                param=at,
            )
    return out


def _data_url(url: str) -> tuple[str, str] | None:
    """(media type, base64 data) of a base64 `data:` URL."""
    if not url.startswith("data:"):
        return None
    head, comma, payload = url.partition(",")
    media_type, _, encoding = head[5:].partition(";")
    if not comma or encoding.lower() != "base64" or not media_type:
        return None
    return media_type, payload


def _not_stored(where: str, instead: str) -> HttpError:
    return refuse(
        f"{where}.file_id names a file stored at OpenAI, which the front door cannot reach: {instead}",
        param=f"{where}.file_id",
    )


def _image(part: dict[str, Any], where: str) -> ImagePart:
    url = part.get("image_url")
    if not isinstance(url, str) or not url:
        if part.get("file_id"):
            raise _not_stored(where, "send the image as image_url (https, or a base64 data: URL)")
        raise refuse(f"{where}.image_url must be a URL (https, or a base64 data: URL)", param=f"{where}.image_url")
    detail = part.get("detail")
    if detail is not None and detail not in _DETAILS:
        raise refuse(f"{where}.detail must be one of {', '.join(_DETAILS)}", param=f"{where}.detail")
    inline = _data_url(url)
    if inline is not None:
        return ImagePart(media_type=inline[0], data=inline[1], detail=detail)
    return ImagePart(url=url, detail=detail)


def _file(part: dict[str, Any], where: str) -> DocumentPart:
    name = part.get("filename")
    name = name if isinstance(name, str) and name else None
    data = part.get("file_data")
    if isinstance(data, str) and data:
        inline = _data_url(data)
        if inline is not None:
            return DocumentPart(media_type=inline[0], data=inline[1], name=name)
        guessed = mimetypes.guess_type(name)[0] if name else None
        return DocumentPart(media_type=guessed or "application/pdf", data=data, name=name)
    url = part.get("file_url")
    if isinstance(url, str) and url:
        return DocumentPart(url=url, name=name)
    if part.get("file_id"):
        raise _not_stored(where, "send its bytes as file_data, or a file_url")
    raise refuse(f"{where} needs file_data or file_url", param=where)


def _call(item: dict[str, Any], where: str) -> ToolCallPart:
    call_id = _text_of(item, "call_id", where)
    name = _text_of(item, "name", where)
    arguments = item.get("arguments", "")
    if isinstance(arguments, dict):
        return ToolCallPart(id=call_id, name=name, arguments=arguments)
    if not isinstance(arguments, str):
        raise refuse(f"{where}.arguments must be a JSON string", param=f"{where}.arguments")
    parsed = parse_arguments(arguments)
    return ToolCallPart(id=call_id, name=name, arguments=parsed, raw_arguments=arguments if parsed is None else None)


def _result(item: dict[str, Any], where: str) -> ToolResultPart:
    call_id = _text_of(item, "call_id", where)
    output = item.get("output")
    if isinstance(output, str):
        return ToolResultPart(tool_call_id=call_id, content=output)
    if not isinstance(output, list):
        raise refuse(f"{where}.output must be a string or a list of content parts", param=f"{where}.output")
    parts: list[TextPart | ImagePart] = []
    for j, part in enumerate(_content(output, f"{where}.output")):
        if not isinstance(part, (TextPart, ImagePart)):
            raise refuse(
                f"{where}.output[{j}]: a function's output may hold text and images, not files",
                param=f"{where}.output[{j}]",
            )
        parts.append(part)
    return ToolResultPart(tool_call_id=call_id, content=parts)


def _reasoning(item: dict[str, Any], where: str) -> list[ContentPart]:
    summary = item.get("summary") or []
    if not isinstance(summary, list):
        raise refuse(f"{where}.summary must be a list", param=f"{where}.summary")
    texts = [_text_of(s, "text", f"{where}.summary[{k}]") if isinstance(s, dict) else "" for k, s in enumerate(summary)]
    if not texts and isinstance(item.get("content"), list):
        # Raw reasoning text (open-weight models) instead of summaries.
        texts = [c["text"] for c in item["content"] if isinstance(c, dict) and isinstance(c.get("text"), str)]
    encrypted = item.get("encrypted_content")
    if isinstance(encrypted, str) and carrier.is_sealed(encrypted):
        try:
            return carrier.open_sealed(encrypted, texts)
        except carrier.Unreadable as exc:
            raise refuse(
                f"{where}.encrypted_content cannot be read: {exc}; send reasoning items back as they came",
                param=f"{where}.encrypted_content",
            ) from None
    thinking: list[ContentPart] = [ThinkingPart(text=t) for t in texts if t]
    if encrypted:
        # OpenAI's own item (a conversation begun at OpenAI): back to it as it came, as its worker keeps one.
        thinking.append(ProviderPart(api=OPENAI, kind="reasoning", data=item))
    return thinking


# -- tools and the rest ------------------------------------------------------------


def _tool(spec: Any, i: int) -> Tool:
    where = f"tools[{i}]"
    if not isinstance(spec, dict) or spec.get("type") != "function":
        kind = spec.get("type") if isinstance(spec, dict) else None
        raise refuse(
            f"{where}: {kind!r} is not a function tool; OpenAI's built-in tools run at OpenAI, not here. "
            "To use one with an OpenAI model, give the whole tools list as OpenAI takes it in "
            "provider_options.openai.tools",
            param=where,
        )
    name = _text_of(spec, "name", where)
    parameters = spec.get("parameters")
    description = spec.get("description")
    strict = spec.get("strict")
    if parameters is not None and not isinstance(parameters, dict):
        raise refuse(f"{where}.parameters must be a JSON Schema object", param=f"{where}.parameters")
    if description is not None and not isinstance(description, str):
        raise refuse(f"{where}.description must be a string", param=f"{where}.description")
    if strict is not None and not isinstance(strict, bool):
        raise refuse(f"{where}.strict must be true or false", param=f"{where}.strict")
    tool = Tool(name=name, description=description or "", strict=strict)
    if parameters is not None:
        tool.parameters = parameters
    return tool


def _tool_choice(choice: str | dict[str, Any] | None, tools: list[Tool]) -> tuple[ToolChoice | None, list[Tool]]:
    if choice is None:
        return None, tools
    if isinstance(choice, str) and choice in _MODES:
        return ToolChoice(mode=_MODES[choice]), tools
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return ToolChoice(mode="tool", name=choice["name"]), tools
    if (
        isinstance(choice, dict)
        and choice.get("type") == "allowed_tools"
        and choice.get("mode") in ("auto", "required")
    ):
        allowed = choice.get("tools")
        if isinstance(allowed, list) and all(isinstance(t, dict) and t.get("type") == "function" for t in allowed):
            names = {t.get("name") for t in allowed}
            return ToolChoice(mode=choice["mode"]), [t for t in tools if t.name in names]
    raise refuse(
        "tool_choice must be auto, none, required, {type: function, name}, or allowed_tools over function tools",
        param="tool_choice",
    )


def _format(spec: _FormatText | _FormatJsonObject | _FormatJsonSchema | None) -> ResponseFormat | None:
    if isinstance(spec, _FormatJsonSchema):
        return ResponseFormat(kind="json_schema", schema=spec.schema, name=spec.name, strict=spec.strict)
    if isinstance(spec, _FormatJsonObject):
        return ResponseFormat(kind="json_object")
    return None


def _options(given: dict[str, dict[str, Any]] | None, carried: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The client's provider options, with OpenAI's own settings added under `openai`
    (what the client put there itself wins)."""
    options = dict(given or {})
    if carried:
        options[OPENAI] = {**carried, **options.get(OPENAI, {})}
    return options


def _echo(body: Body) -> dict[str, Any]:
    """What a response says of its request (the fields the SDK's `Response` holds)."""
    text = {"format": msgspec.to_builtins(body.text.format) if body.text and body.text.format else {"type": "text"}}
    if body.text is not None and body.text.verbosity:
        text["verbosity"] = body.text.verbosity
    tool_choice: Any = body.tool_choice if body.tool_choice is not None else "auto"
    return {
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "metadata": body.metadata or {},
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "reasoning": {
            "effort": body.reasoning.effort if body.reasoning else None,
            "summary": (body.reasoning.summary or body.reasoning.generate_summary) if body.reasoning else None,
        },
        "temperature": body.temperature,
        "text": text,
        "tool_choice": tool_choice,
        "tools": [_echo_tool(t) for t in body.tools or ()],
        "top_p": body.top_p,
        "truncation": body.truncation or "disabled",
        "user": body.user,
    }


def _echo_tool(spec: dict[str, Any]) -> dict[str, Any]:
    out = {"type": "function", "name": spec["name"], "parameters": spec.get("parameters"), "strict": spec.get("strict")}
    if spec.get("description") is not None:
        out["description"] = spec["description"]
    return out
