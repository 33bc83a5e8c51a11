"""A Chat Completions request body -> the canonical `Request`. Pure.

The body is read into Structs of the API's own shape (`ChatBody`), which refuse a
field the API does not have, then translated field by field:

* every role: `system` and `developer` (text), `user` (text, `image_url` with an
  http(s) or `data:` URL and its detail, `input_audio`, `file` with `file_data`),
  `assistant` (text, `refusal`, `tool_calls`), `tool` (its `tool_call_id`); `name`;
* `tools` (functions, `strict`), `tool_choice` (`none`, `auto`, `required`, a named
  function, or `allowed_tools`, which narrows the tools sent), `response_format`
  (`text`, `json_object`, `json_schema`), `stop`, `max_tokens` /
  `max_completion_tokens`, `temperature`, `top_p`, `seed`, `reasoning_effort`,
  `metadata`, and `user` / `safety_identifier` as the end user's id
  (`metadata.user_id`, which every worker sends its provider);
* OpenAI's own settings of the provider's service (`service_tier`, `store`, the
  prompt cache's key and retention, `moderation`, `parallel_tool_calls: false`) are
  carried in `provider_options` for the OpenAI providers (`openai`, and
  `openai_compat`, whose servers take the Chat Completions fields as given); other
  providers have nothing to apply them to;
* what the canonical form cannot express is refused by a sentence naming the field
  (`n` other than 1, log probabilities, penalties, audio output, predicted output,
  web search, custom tools, the deprecated `functions`), unless its value is the one
  that changes nothing (`n: 1`, `logprobs: false`, `frequency_penalty: 0`...);
* trunkline's own fields (an SDK's `extra_body`): `provider_options`, `provider`,
  `session_id`, `max_retries`, `timeouts`.

Cache hints on content parts (`cache_control`, `prompt_cache_breakpoint`) are taken
and dropped: the workers place their providers' cache breakpoints themselves. An
earlier answer's `reasoning_content` and `annotations` are dropped as well (no
provider takes them back).
"""

from __future__ import annotations

import mimetypes
from collections.abc import Callable
from typing import Any, Literal

import msgspec

from ..protocol.messages import (
    AudioPart,
    ContentPart,
    DocumentPart,
    ImagePart,
    Message,
    ReasoningEffort,
    Request,
    ResponseFormat,
    TextPart,
    Timeouts,
    Tool,
    ToolCallPart,
    ToolChoice,
)
from .bodies import convert, split_data_url
from .errors import refuse

# -- the body, as the API defines it --------------------------------------------------------


class _In(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Part of a request as the client sent it: a field the API does not have is refused."""


class _Part(_In, tag_field="type", kw_only=True):
    cache_control: Any = None  # Anthropic-style cache hints some clients add: dropped
    prompt_cache_breakpoint: Any = None


class TextIn(_Part, tag="text", kw_only=True):
    text: str


class ImageURL(_In, kw_only=True):
    url: str
    detail: Literal["auto", "low", "high", "original"] | None = None


class ImageIn(_Part, tag="image_url", kw_only=True):
    image_url: ImageURL | str  # the bare URL: the early vision form, which LiteLLM still takes


class InputAudio(_In, kw_only=True):
    data: str
    format: Literal["wav", "mp3"]


class AudioIn(_Part, tag="input_audio", kw_only=True):
    input_audio: InputAudio


class FileRef(_In, kw_only=True):
    file_data: str | None = None
    file_id: str | None = None
    filename: str | None = None


class FileIn(_Part, tag="file", kw_only=True):
    file: FileRef


class RefusalIn(_Part, tag="refusal", kw_only=True):
    refusal: str


class _Message(_In, tag_field="role", kw_only=True):
    name: str | None = None


class SystemIn(_Message, tag="system", kw_only=True):
    content: str | list[TextIn]


class DeveloperIn(_Message, tag="developer", kw_only=True):
    content: str | list[TextIn]


class UserIn(_Message, tag="user", kw_only=True):
    content: str | list[TextIn | ImageIn | AudioIn | FileIn]


class FunctionCallIn(_In, kw_only=True):
    name: str
    arguments: str


class ToolCallIn(_In, tag_field="type", tag="function", kw_only=True):
    id: str
    function: FunctionCallIn
    index: int | None = None  # kept by a streamed answer's accumulated calls, sent back as they are


class CustomCallIn(_In, tag_field="type", tag="custom", kw_only=True):
    id: str
    custom: dict[str, Any]


class AssistantIn(_Message, tag="assistant", kw_only=True):
    content: str | list[TextIn | RefusalIn] | None = None
    refusal: str | None = None
    tool_calls: list[ToolCallIn | CustomCallIn] | None = None
    reasoning_content: str | None = None  # an answer's reasoning, as LiteLLM returns it: dropped
    annotations: Any = None  # an answer's citations: nothing to send back
    audio: Any = None
    function_call: Any = None


class ToolIn(_Message, tag="tool", kw_only=True):
    content: str | list[TextIn]
    tool_call_id: str


class FunctionIn(_Message, tag="function", kw_only=True):
    content: str | None = None


MessageIn = SystemIn | DeveloperIn | UserIn | AssistantIn | ToolIn | FunctionIn


class FunctionDef(_In, kw_only=True):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class FunctionTool(_In, tag_field="type", tag="function", kw_only=True):
    function: FunctionDef


class CustomTool(_In, tag_field="type", tag="custom", kw_only=True):
    custom: dict[str, Any]


class Named(_In, kw_only=True):
    name: str


class NamedChoice(_In, tag_field="type", tag="function", kw_only=True):
    function: Named


class NamedCustomChoice(_In, tag_field="type", tag="custom", kw_only=True):
    custom: Named


class AllowedTools(_In, kw_only=True):
    mode: Literal["auto", "required"]
    tools: list[dict[str, Any]]


class AllowedChoice(_In, tag_field="type", tag="allowed_tools", kw_only=True):
    allowed_tools: AllowedTools


ToolChoiceIn = Literal["none", "auto", "required"] | NamedChoice | NamedCustomChoice | AllowedChoice


class FormatText(_In, tag_field="type", tag="text", kw_only=True):
    pass


class FormatJsonObject(_In, tag_field="type", tag="json_object", kw_only=True):
    pass


class JsonSchemaSpec(_In, kw_only=True):
    name: str
    description: str | None = None  # no canonical place: the schema's own description says it
    schema: dict[str, Any] | None = None
    strict: bool | None = None


class FormatJsonSchema(_In, tag_field="type", tag="json_schema", kw_only=True):
    json_schema: JsonSchemaSpec


class StreamOptions(_In, kw_only=True):
    include_usage: bool | None = None
    include_obfuscation: bool | None = None  # padding against size side channels: none is sent


class ChatBody(_In, kw_only=True):
    """POST /v1/chat/completions, every field the API defines, and trunkline's own."""

    model: str
    messages: list[MessageIn]
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    tools: list[FunctionTool | CustomTool] | None = None
    tool_choice: ToolChoiceIn | None = None
    parallel_tool_calls: bool | None = None
    response_format: FormatText | FormatJsonObject | FormatJsonSchema | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    reasoning_effort: ReasoningEffort | None = None
    metadata: dict[str, str] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    # OpenAI's service settings, carried for OpenAI's providers (`_carried`).
    service_tier: str | None = None
    store: bool | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    prompt_cache_options: dict[str, Any] | None = None
    moderation: dict[str, Any] | None = None
    # Taken only at the value that changes nothing (`_NEUTRAL`).
    n: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    modalities: list[str] | None = None
    audio: Any = None
    prediction: Any = None
    web_search_options: Any = None
    verbosity: str | None = None
    functions: Any = None
    function_call: Any = None
    # trunkline's own (an SDK's `extra_body`).
    provider_options: dict[str, dict[str, Any]] | None = None
    provider: str | None = None
    session_id: str | None = None
    max_retries: int | None = None
    timeouts: Timeouts | None = None


# -- what is refused, and what is carried ----------------------------------------------------

_ELSEWHERE = (
    "has no canonical form, so trunkline cannot send it to every provider; to send it to one, "
    "put it in `provider_options.<provider>` (the SDK's extra_body)"
)

#: Fields the canonical form cannot express: (whether a value changes nothing, why it is refused otherwise).
_NEUTRAL: dict[str, tuple[Callable[[Any], bool], str]] = {
    "n": (
        lambda v: v == 1,
        "must be 1: trunkline makes one completion per call (make n calls for n choices)",
    ),
    "logprobs": (lambda v: v is False, "is not available: the canonical response carries no log probabilities"),
    "top_logprobs": (lambda v: v == 0, "is not available: the canonical response carries no log probabilities"),
    "frequency_penalty": (lambda v: v == 0, _ELSEWHERE),
    "presence_penalty": (lambda v: v == 0, _ELSEWHERE),
    "logit_bias": (lambda v: not v, _ELSEWHERE + " (token ids differ from one model's tokenizer to another's)"),
    "modalities": (lambda v: v == ["text"], 'can only be ["text"]: trunkline answers in text'),
    "audio": (lambda v: False, "is not available: trunkline answers in text"),
    "prediction": (lambda v: False, _ELSEWHERE),
    "web_search_options": (
        lambda v: False,
        "has no canonical form: a provider's server tools go in its `provider_options` (the SDK's extra_body)",
    ),
    "verbosity": (lambda v: False, _ELSEWHERE),
    "functions": (lambda v: not v, "is the deprecated form of `tools`: send `tools`"),
    "function_call": (lambda v: False, "is the deprecated form of `tool_choice`: send `tool_choice`"),
}

#: The OpenAI service settings carried in `provider_options`, by provider type: the
#: Responses worker passes these body fields as given (`OpenAIOptions`); an
#: OpenAI-compatible server is sent every one as given.
_PASSED_TO_OPENAI = ("service_tier", "store", "prompt_cache_key", "prompt_cache_retention")
_EXTRA_TO_OPENAI = ("prompt_cache_options", "moderation")


def _unknown(field: str) -> str:
    if "." in field or "[" in field:
        return f"unknown field `{field}`"
    return (
        f"unknown field `{field}`: it is not a Chat Completions field; to send a provider a field trunkline "
        "does not know, put it in `provider_options.<provider>.extra_body` (the SDK's extra_body)"
    )


# -- the translation -----------------------------------------------------------------------------


def parse_body(body: Any) -> tuple[Request, ChatBody]:
    """The canonical request for a Chat Completions body, and the body as read."""
    chat = convert(body, ChatBody, _unknown)
    for name, (neutral, why) in _NEUTRAL.items():
        value = getattr(chat, name)
        if value is not None and not neutral(value):
            raise refuse(f"`{name}` {why}", param=name)
    if not chat.model:
        raise refuse("`model` is required", param="model")
    tools = _tools(chat.tools)
    choice, tools = _tool_choice(chat.tool_choice, tools)
    request = Request(
        model=chat.model,
        messages=[_message(m, f"messages[{i}]") for i, m in enumerate(chat.messages)],
        tools=tools,
        tool_choice=choice,
        response_format=_response_format(chat.response_format),
        temperature=chat.temperature,
        top_p=chat.top_p,
        max_tokens=chat.max_completion_tokens if chat.max_completion_tokens is not None else chat.max_tokens,
        stop_sequences=[chat.stop] if isinstance(chat.stop, str) else list(chat.stop or ()),
        seed=chat.seed,
        reasoning_effort=chat.reasoning_effort,
        metadata=dict(chat.metadata or {}),
        provider_options=_carried(chat),
        provider=chat.provider,
        session_id=chat.session_id,
        max_retries=chat.max_retries,
        timeouts=chat.timeouts,
    )
    end_user = chat.safety_identifier or chat.user
    if end_user:
        request.metadata["user_id"] = end_user
    return request, chat


def _carried(chat: ChatBody) -> dict[str, dict[str, Any]]:
    """The body's `provider_options`, with OpenAI's service settings added for the OpenAI
    provider types (what the client put there itself wins)."""
    options = {name: dict(entry) for name, entry in (chat.provider_options or {}).items()}
    given = {name: getattr(chat, name) for name in _PASSED_TO_OPENAI + _EXTRA_TO_OPENAI}
    if chat.parallel_tool_calls is False:
        given["parallel_tool_calls"] = False
    given = {k: v for k, v in given.items() if v is not None}
    if not given:
        return options
    compat = options.setdefault("openai_compat", {})
    for key, value in given.items():
        compat.setdefault(key, value)
    openai = options.setdefault("openai", {})
    for key, value in given.items():
        if key in _EXTRA_TO_OPENAI:
            extra = openai.setdefault("extra_body", {})
            if isinstance(extra, dict):
                extra.setdefault(key, value)
        else:
            openai.setdefault(key, value)
    return options


def _message(m: MessageIn, where: str) -> Message:
    if isinstance(m, UserIn):
        if isinstance(m.content, str):
            return Message(role="user", content=[TextPart(text=m.content)], name=m.name)
        return Message(
            role="user",
            content=[_user_part(p, f"{where}.content[{j}]") for j, p in enumerate(m.content)],
            name=m.name,
        )
    if isinstance(m, AssistantIn):
        return _assistant(m, where)
    if isinstance(m, ToolIn):
        if isinstance(m.content, str):
            return Message.tool_result(m.tool_call_id, m.content, name=m.name)
        return Message.tool_result(m.tool_call_id, [TextPart(text=p.text) for p in m.content], name=m.name)
    if isinstance(m, SystemIn | DeveloperIn):
        role: Literal["system", "developer"] = "system" if isinstance(m, SystemIn) else "developer"
        return Message(role=role, content=_texts(m.content), name=m.name)
    raise refuse(
        f"`{where}`: the `function` role is the deprecated form of `tool`: answer a tool call with a "
        "`tool` message and its tool_call_id",
        param=f"{where}.role",
    )


def _texts(content: str | list[TextIn]) -> list[ContentPart]:
    if isinstance(content, str):
        return [TextPart(text=content)]
    return [TextPart(text=p.text) for p in content]


#: `input_audio.format` -> the media type.
_AUDIO = {"wav": "audio/wav", "mp3": "audio/mpeg"}


def _user_part(part: TextIn | ImageIn | AudioIn | FileIn, where: str) -> ContentPart:
    if isinstance(part, TextIn):
        return TextPart(text=part.text)
    if isinstance(part, ImageIn):
        image = ImageURL(url=part.image_url) if isinstance(part.image_url, str) else part.image_url
        if image.detail == "original":
            raise refuse(
                f"`{where}.image_url.detail` `original` has no canonical form (auto, low or high)",
                param=f"{where}.image_url.detail",
            )
        inline = split_data_url(image.url, f"{where}.image_url.url")
        if inline is not None:
            return ImagePart(media_type=inline[0], data=inline[1], detail=image.detail)
        return ImagePart(url=image.url, detail=image.detail)
    if isinstance(part, AudioIn):
        audio = part.input_audio
        inline = split_data_url(audio.data, f"{where}.input_audio.data")
        return AudioPart(data=inline[1] if inline else audio.data, media_type=_AUDIO[audio.format])
    return _document(part.file, where)


def _document(file: FileRef, where: str) -> DocumentPart:
    if file.file_id is not None:
        raise refuse(
            f"`{where}.file.file_id` names a file kept at OpenAI, which the front door does not fetch: "
            "send its bytes as `file_data`",
            param=f"{where}.file.file_id",
        )
    if not file.file_data:
        raise refuse(f"`{where}.file` needs `file_data`", param=f"{where}.file.file_data")
    inline = split_data_url(file.file_data, f"{where}.file.file_data")
    if inline is not None:
        media_type, data = inline
    else:
        # Bare base64: the file name says what it is; OpenAI takes PDFs.
        guessed = mimetypes.guess_type(file.filename or "")[0]
        media_type, data = guessed or "application/pdf", file.file_data
    return DocumentPart(data=data, media_type=media_type, name=file.filename)


def _assistant(m: AssistantIn, where: str) -> Message:
    if m.audio is not None:
        raise refuse(
            f"`{where}.audio` refers to audio OpenAI kept, which has no canonical form: send the "
            "answer's transcript as its content",
            param=f"{where}.audio",
        )
    if m.function_call is not None:
        raise refuse(
            f"`{where}.function_call` is the deprecated form of `tool_calls`: send `tool_calls`",
            param=f"{where}.function_call",
        )
    content: list[ContentPart] = []
    if isinstance(m.content, str):
        if m.content:
            content.append(TextPart(text=m.content))
    elif m.content is not None:
        for p in m.content:
            text = p.text if isinstance(p, TextIn) else p.refusal
            if text:
                content.append(TextPart(text=text))
    if m.refusal:
        content.append(TextPart(text=m.refusal))
    for k, call in enumerate(m.tool_calls or ()):
        if isinstance(call, CustomCallIn):
            raise refuse(
                f"`{where}.tool_calls[{k}]`: custom tool calls have no canonical form (only functions)",
                param=f"{where}.tool_calls[{k}].type",
            )
        content.append(_tool_call(call))
    return Message(role="assistant", content=content, name=m.name)


def _tool_call(call: ToolCallIn) -> ToolCallPart:
    raw = call.function.arguments
    try:
        arguments = msgspec.json.decode(raw) if raw.strip() else {}
    except msgspec.DecodeError:
        arguments = None
    if isinstance(arguments, dict):
        return ToolCallPart(id=call.id, name=call.function.name, arguments=arguments)
    # Not a JSON object: kept as the model wrote it, for the provider to be sent as is.
    return ToolCallPart(id=call.id, name=call.function.name, arguments=None, raw_arguments=raw)


def _tools(tools: list[FunctionTool | CustomTool] | None) -> list[Tool]:
    out: list[Tool] = []
    for i, tool in enumerate(tools or ()):
        if isinstance(tool, CustomTool):
            raise refuse(
                f"`tools[{i}]`: custom tools (free-form input, grammars) have no canonical form; send a function tool",
                param=f"tools[{i}].type",
            )
        f = tool.function
        spec = Tool(name=f.name, description=f.description or "", strict=f.strict)
        if f.parameters is not None:
            spec.parameters = f.parameters
        out.append(spec)
    return out


def _tool_choice(choice: ToolChoiceIn | None, tools: list[Tool]) -> tuple[ToolChoice | None, list[Tool]]:
    if choice is None:
        return None, tools
    if isinstance(choice, str):
        return ToolChoice(mode=choice), tools
    if isinstance(choice, NamedChoice):
        return ToolChoice(mode="tool", name=choice.function.name), tools
    if isinstance(choice, NamedCustomChoice):
        raise refuse("`tool_choice`: custom tools have no canonical form (only functions)", param="tool_choice.custom")
    # `allowed_tools`: the model may call only these, so only these are sent.
    names: set[str] = set()
    for k, entry in enumerate(choice.allowed_tools.tools):
        where = f"tool_choice.allowed_tools.tools[{k}]"
        function = entry.get("function")
        name = function.get("name") if entry.get("type") == "function" and isinstance(function, dict) else None
        if not isinstance(name, str):
            raise refuse(f'`{where}` must be {{"type": "function", "function": {{"name": ...}}}}', param=where)
        if all(t.name != name for t in tools):
            raise refuse(f"`{where}` names `{name}`, which is not among the tools", param=where)
        names.add(name)
    return ToolChoice(mode=choice.allowed_tools.mode), [t for t in tools if t.name in names]


def _response_format(fmt: FormatText | FormatJsonObject | FormatJsonSchema | None) -> ResponseFormat | None:
    if fmt is None or isinstance(fmt, FormatText):
        return None
    if isinstance(fmt, FormatJsonObject):
        return ResponseFormat(kind="json_object")
    spec = fmt.json_schema
    return ResponseFormat(kind="json_schema", schema=spec.schema, name=spec.name, strict=spec.strict)
