"""Tools with handlers: their definitions, their schemas, and running a turn's calls.

    @trunkline.tool
    async def get_weather(city: str, unit: Literal["C", "F"] = "C") -> str:
        '''The weather now in a city.

        Args:
            city: the city's name
        '''

A `Tool` is the wire definition (it encodes exactly as the protocol's `Tool`)
that may also carry an `execute` handler, which never leaves this process. A
tool with a handler is *active*: `generate` runs its calls. One without is
passive: its calls come back to the caller.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from functools import partial
from typing import TYPE_CHECKING, Any, get_type_hints, overload

import anyio
import msgspec

from .protocol.messages import ImagePart, Message, TextPart, ToolCallPart, ToolResultPart
from .protocol.messages import Tool as ToolDefinition
from .protocol.tool_arguments import argument_errors

#: Handler parameters filled in by the loop rather than by the model.
INJECTED = ("messages", "tool_call_id")

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")


class _ToolMeta(msgspec.StructMeta):
    # Struct types may define neither __new__ nor __init__; the handler is taken here
    # and kept in the instance's __dict__, which msgspec never encodes.
    def __call__(
        cls, *args: Any, execute: Callable[..., Any] | None = None, timeout_s: float | None = None, **kwargs: Any
    ) -> Any:
        obj = super().__call__(*args, **kwargs)
        if not _NAME.match(obj.name):
            raise ValueError(
                f"tool name {obj.name!r}: use a letter, then letters, digits or underscores "
                "(64 at most), the names every provider accepts"
            )
        if obj.parameters.get("type") != "object":
            raise ValueError(f'tool {obj.name!r}: parameters must be a JSON Schema with "type": "object"')
        obj.execute = execute
        obj.timeout_s = timeout_s
        return obj


class Tool(ToolDefinition, metaclass=_ToolMeta, dict=True, kw_only=True):
    """A tool the model may call. `Tool(name=..., parameters=..., execute=fn)` is active
    (`fn`, sync or async, gets the arguments as keywords; `timeout_s` bounds one call);
    without `execute` it is passive. (`execute` and `timeout_s` are plain attributes,
    not fields: they are never encoded.)"""

    if TYPE_CHECKING:
        # What the metaclass takes, as type checkers should see it: two more keywords of
        # the constructor, and two attributes of every tool.
        execute: Callable[..., Any] | None = None
        timeout_s: float | None = None

    @property
    def active(self) -> bool:
        return getattr(self, "execute", None) is not None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """`@tool` keeps the function callable: calling the tool calls its handler."""
        execute = getattr(self, "execute", None)
        if execute is None:
            raise TypeError(f"tool {self.name!r} is passive (no execute): there is nothing to call")
        return execute(*args, **kwargs)


def tool_fields(value: dict[str, Any]) -> dict[str, Any]:
    """A tool dict's fields: ours as they are, or those inside OpenAI's
    `{"type": "function", "function": {...}}`."""
    if value.get("type") == "function" and isinstance(value.get("function"), dict):
        return {k: v for k, v in value["function"].items() if k in ToolDefinition.__struct_fields__}
    return value


def as_tool(value: Any) -> ToolDefinition:
    """What people pass as a tool, as one: a `Tool` as is; a plain function as an active
    tool (its schema from its hints and docstring); OpenAI's `{"type": "function",
    "function": {...}}` and our own field dict as a passive `Tool`."""
    if isinstance(value, ToolDefinition):
        return value
    if isinstance(value, dict):
        known = {k: v for k, v in tool_fields(value).items() if k in ToolDefinition.__struct_fields__}
        if "name" not in known:
            raise TypeError(f"a tool needs a name: {value!r}")
        return Tool(**known)
    if callable(value):
        return tool(value)
    raise TypeError(f"a tool is a function, a trunkline.Tool or a dict with a name, not {type(value).__name__}")


@overload
def tool(fn: Callable[..., Any]) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: dict[str, Any] | None = None,
    timeout_s: float | None = None,
    strict: bool | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    parameters: dict[str, Any] | None = None,
    timeout_s: float | None = None,
    strict: bool | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make an active `Tool` of a function; its schema comes from the type hints and
    the docstring unless `parameters` is given. Use bare (`@tool`) or with options."""

    def make(fn: Callable[..., Any]) -> Tool:
        summary, arg_docs = _docstring(fn)
        return Tool(
            name=name or fn.__name__,
            description=description if description is not None else summary,
            parameters=parameters if parameters is not None else schema_from_signature(fn, arg_docs),
            strict=strict,
            execute=fn,
            timeout_s=timeout_s,
        )

    return make(fn) if fn is not None else make


def schema_from_signature(fn: Callable[..., Any], descriptions: dict[str, str] | None = None) -> dict[str, Any]:
    """The JSON Schema (an object) of a function's parameters, from its type hints."""
    hints = get_type_hints(fn)
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for param in inspect.signature(fn).parameters.values():
        if param.name in INJECTED or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        hint = hints.get(param.name, Any)
        fields.append((param.name, hint) if param.default is param.empty else (param.name, hint, param.default))
    struct = msgspec.defstruct(f"{fn.__name__}_arguments", fields, kw_only=True)
    schema = inline_root(msgspec.json.schema(struct))
    schema.pop("title", None)
    for arg, text in (descriptions or {}).items():
        if arg in schema.get("properties", {}):
            schema["properties"][arg]["description"] = text
    return schema


def inline_root(schema: dict[str, Any]) -> dict[str, Any]:
    """msgspec puts a type's schema under `$defs` with a `$ref` at the root; providers
    want the object itself at the root."""
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/$defs/"):
        return schema
    defs = dict(schema.get("$defs", {}))
    root = dict(defs.pop(ref.rsplit("/", 1)[1]))
    if defs:
        root["$defs"] = defs
    return root


def _docstring(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """The summary paragraph and the `Args:` entries of a Google-style docstring."""
    doc = inspect.getdoc(fn) or ""
    summary = doc.split("\n\n", 1)[0].replace("\n", " ").strip()
    args: dict[str, str] = {}
    in_args = False
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            in_args = True
            continue
        if in_args:
            match = re.match(r"^(\w+)(?:\s*\(.*?\))?\s*:\s*(.*)$", stripped)
            if match:
                args[match.group(1)] = match.group(2)
            elif stripped and not line.startswith((" ", "\t")):
                in_args = False
    return summary, args


# -- running calls ------------------------------------------------------------------------


def is_active(t: Any) -> bool:
    return getattr(t, "execute", None) is not None


def _result_content(value: Any) -> str | list[TextPart | ImagePart]:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(v, (TextPart, ImagePart)) for v in value):
        return value
    try:
        return msgspec.json.encode(value).decode()
    except TypeError:
        return str(value)


#: `repair_tool_call(call, error)`: given a call that names no tool of the loop, whose
#: arguments are not a JSON object or break its tool's schema, and the sentence saying
#: so, return the call as it should have been (or None to answer the model with the
#: error). Sync or async; it may also take `messages` and `tools` (injected by name).
RepairToolCall = Callable[..., Any]


def call_problem(call: ToolCallPart, tools: dict[str, Any]) -> str | None:
    """Why `call` cannot run (unknown tool, arguments that are not an object or break the
    tool's schema), as a sentence for the model; None when it can."""
    t = tools.get(call.name)
    if t is None:
        known = ", ".join(sorted(tools)) or "none"
        return f"unknown tool {call.name!r}; the tools available are: {known}"
    if call.arguments is None:
        return f"the arguments of {call.name} are not a JSON object: {call.raw_arguments!r}"
    problems = argument_errors(t.parameters, call.arguments)
    if problems is not None:
        return f"invalid arguments for {call.name}: {problems}"
    return None


async def _repair(
    call: ToolCallPart, problem: str, repair: RepairToolCall, tools: dict[str, Any], messages: Sequence[Message]
) -> tuple[ToolCallPart | None, str]:
    """The repaired call (its id kept: the result must answer the call the model made),
    or None and the sentence for the model."""
    accepted = _parameters(repair)
    kwargs: dict[str, Any] = {}
    if "messages" in accepted:
        kwargs["messages"] = list(messages)
    if "tools" in accepted:
        kwargs["tools"] = list(tools.values())
    try:
        fixed = repair(call, problem, **kwargs)
        if inspect.isawaitable(fixed):
            fixed = await fixed
    except Exception as exc:  # noqa: BLE001 - the caller's function failing leaves the model's error as it was
        return None, f"{problem} (repair_tool_call failed: {type(exc).__name__}: {exc})"
    if fixed is None:
        return None, problem
    if not isinstance(fixed, ToolCallPart):
        return None, f"{problem} (repair_tool_call returned {type(fixed).__name__}, not a ToolCallPart or None)"
    if fixed.id != call.id:
        fixed = msgspec.structs.replace(fixed, id=call.id)
    return fixed, problem


async def run_call(
    call: ToolCallPart,
    tools: dict[str, Any],
    messages: Sequence[Message],
    repair: RepairToolCall | None = None,
) -> ToolResultPart:
    """One call's result: the handler's return value, or an error result saying what
    went wrong (unknown tool, bad arguments, an exception, a timeout) for the model."""
    return (await _run_call(call, tools, messages, repair))[1]


async def _run_call(
    call: ToolCallPart, tools: dict[str, Any], messages: Sequence[Message], repair: RepairToolCall | None
) -> tuple[ToolCallPart, ToolResultPart]:
    """The call as it ran (repaired, when `repair` fixed it) and its result."""

    def error(text: str) -> tuple[ToolCallPart, ToolResultPart]:
        return call, ToolResultPart(tool_call_id=call.id, content=text, is_error=True, name=call.name)

    problem = call_problem(call, tools)
    if problem is not None:
        if repair is None:
            return error(problem)
        fixed, problem = await _repair(call, problem, repair, tools, messages)
        if fixed is None:
            return error(problem)
        again = call_problem(fixed, tools)
        call = fixed
        if again is not None:  # one repair per call: a second guess is the model's to make
            return error(f"{again} (after repair_tool_call)")
    t = tools[call.name]
    fn = t.execute
    assert call.arguments is not None  # call_problem found it an object
    kwargs = dict(call.arguments)
    accepted = _parameters(fn)
    if "messages" in accepted:
        kwargs["messages"] = list(messages)
    if "tool_call_id" in accepted:
        kwargs["tool_call_id"] = call.id
    timeout = getattr(t, "timeout_s", None)
    try:
        with anyio.fail_after(timeout) if timeout else nullcontext():
            if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__):
                value = await fn(**kwargs)
            else:
                # A thread of its own, so N blocking tools run side by side too; a cancelled
                # loop stops waiting for it (a thread cannot be stopped from outside).
                value = await anyio.to_thread.run_sync(partial(fn, **kwargs), abandon_on_cancel=True)
    except TimeoutError:
        return error(f"{call.name} did not finish within {timeout:g}s")
    except Exception as exc:  # noqa: BLE001 - any failure of the caller's function goes to the model
        return error(f"{call.name} failed: {type(exc).__name__}: {exc}")
    return call, ToolResultPart(tool_call_id=call.id, content=_result_content(value), name=call.name)


def _parameters(fn: Callable[..., Any]) -> set[str]:
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


async def run_calls(
    calls: Sequence[ToolCallPart],
    tools: dict[str, Any],
    messages: Sequence[Message],
    repair: RepairToolCall | None = None,
) -> list[ToolResultPart]:
    """Every call of one turn, concurrently; the results in the calls' order."""
    return (await run_turn(calls, tools, messages, repair))[1]


async def run_turn(
    calls: Sequence[ToolCallPart],
    tools: dict[str, Any],
    messages: Sequence[Message],
    repair: RepairToolCall | None = None,
) -> tuple[list[ToolCallPart], list[ToolResultPart]]:
    """Every call of one turn, concurrently: the calls as they ran (a repaired one in
    place of the model's) and their results, both in the calls' order."""
    ran: list[tuple[ToolCallPart, ToolResultPart] | None] = [None] * len(calls)

    async def one(i: int, call: ToolCallPart) -> None:
        ran[i] = await _run_call(call, tools, messages, repair)

    async with anyio.create_task_group() as tg:
        for i, call in enumerate(calls):
            tg.start_soon(one, i, call)
    done = [r for r in ran if r is not None]
    return [c for c, _ in done], [r for _, r in done]


def result_messages(results: Sequence[ToolResultPart]) -> list[Message]:
    return [Message(role="tool", content=[r]) for r in results]


__all__ = [
    "RepairToolCall",
    "Tool",
    "argument_errors",
    "call_problem",
    "run_call",
    "run_calls",
    "run_turn",
    "schema_from_signature",
    "tool",
]
