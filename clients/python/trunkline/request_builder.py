"""A `Request` from what people write: a model and a prompt, messages as objects or
as OpenAI's dicts, tools as functions, OpenAI's tool and tool-choice forms and its
`response_format` spelling. A misspelt field is refused, naming the nearest one;
everything else the daemon checks, as it checks every request."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

import msgspec

from .protocol.messages import Message, Request, ResponseFormat, Timeouts
from .tools import tool as make_tool
from .tools import tool_fields


def build_request(
    model: str | Request, messages: str | Message | Sequence[Message] | None = None, **fields: Any
) -> Request:
    """A `Request` from a model and a prompt (or messages), with any other fields."""
    if isinstance(model, Request):
        if messages is None and not fields:
            return model
        base = msgspec.structs.asdict(model)
        if messages is not None:
            base["messages"] = _messages(messages)
        base.update(fields)
    else:
        if messages is None:
            raise TypeError("give the messages (or a prompt string) with the model")
        base = {"model": model, "messages": _messages(messages), **fields}
    if base.get("tools"):
        base["tools"] = [_plain_tool(t) for t in base["tools"]]
    if "tool_choice" in base:
        base["tool_choice"] = _plain_tool_choice(base["tool_choice"])
    plain = msgspec.to_builtins(base)
    _check_fields(plain, Request, "")
    fmt = plain.get("response_format")
    if isinstance(fmt, dict):
        plain["response_format"] = _response_format(fmt)
    _check_fields(plain.get("response_format"), ResponseFormat, "response_format.")
    _check_fields(plain.get("timeouts"), Timeouts, "timeouts.")
    try:
        # Plain dicts are welcome anywhere (tools, parts, options): convert checks them.
        return msgspec.convert(plain, Request)
    except msgspec.ValidationError as exc:
        raise TypeError(f"invalid request: {exc}") from None


def _check_fields(value: Any, struct: type[msgspec.Struct], where: str) -> None:
    """A misspelt field must not be dropped silently (msgspec ignores unknown keys):
    refuse it, naming the nearest valid one."""
    if not isinstance(value, dict):
        return
    names = struct.__struct_fields__
    for key in value:
        if key not in names:
            close = difflib.get_close_matches(str(key), names, n=1, cutoff=0.6)
            hint = f"; did you mean `{where}{close[0]}`?" if close else f"; valid: {', '.join(names)}"
            raise TypeError(f"unknown request field `{where}{key}`{hint}")


def _response_format(fmt: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's spelling (`{"type": "json_object"}`, `{"type": "json_schema", "json_schema":
    {"name", "schema", "strict"}}`) is taken as ours (`kind`, `schema`, `name`, `strict`)."""
    if "type" not in fmt or "kind" in fmt:
        return fmt
    out = {k: v for k, v in fmt.items() if k not in ("type", "json_schema")}
    out["kind"] = fmt["type"]
    inner = fmt.get("json_schema")
    if isinstance(inner, dict):
        for key in ("name", "schema", "strict"):
            if key in inner:
                out[key] = inner[key]
    return out


def _messages(messages: str | Message | Sequence[Message | dict[str, Any]]) -> list[Any]:
    if isinstance(messages, str):
        return [Message.user(messages)]
    if isinstance(messages, Message):
        return [messages]
    return [_plain_message(m) if isinstance(m, dict) else m for m in messages]


def _plain_message(message: dict[str, Any]) -> dict[str, Any]:
    """The form OpenAI and LiteLLM users write: `{"role": "user", "content": "hi"}`
    (string content becomes a text part; a `tool` message's string is its result)."""
    content = message.get("content")
    if isinstance(content, str):
        message = dict(message)
        if message.get("role") == "tool" and message.get("tool_call_id"):
            message["content"] = [{"type": "tool_result", "tool_call_id": message["tool_call_id"], "content": content}]
        else:
            message["content"] = [{"type": "text", "text": content}] if content else []
    return message


def _plain_tool(tool: Any) -> Any:
    """A plain function becomes an active tool (its schema from its hints and docstring);
    OpenAI's `{"type": "function", "function": {...}}` becomes our field dict. A dict of
    our own fields goes as it is: the daemon checks it, as it checks every request."""
    if isinstance(tool, dict):
        return tool_fields(tool)
    if callable(tool) and not isinstance(tool, msgspec.Struct):
        return make_tool(tool)
    return tool


def _plain_tool_choice(choice: Any) -> Any:
    """`"auto"`, `"none"`, `"required"` (or OpenAI's `"any"`), a tool's name, or OpenAI's
    `{"type": "function", "function": {"name": ...}}`."""
    if isinstance(choice, str):
        if choice in ("auto", "none", "required"):
            return {"mode": choice}
        if choice == "any":
            return {"mode": "required"}
        return {"mode": "tool", "name": choice}
    if isinstance(choice, dict) and choice.get("type") == "function":
        function = choice.get("function") or {}
        return {"mode": "tool", "name": function.get("name") or choice.get("name")}
    return choice
