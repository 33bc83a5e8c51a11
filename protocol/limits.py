"""Bounds on the free-form JSON a request may carry.

Most of a request has a fixed shape, but `provider_options`, tool `parameters`,
a response `schema` and the `arguments` of tool calls in the history are
arbitrary JSON. Unbounded nesting there would overflow the C stack of the
encoder further down the line (the supervisor re-encodes every request for its
worker), so it is refused as the message is read. So is any value JSON cannot
hold: msgpack carries more than JSON (extension values, timestamps, binary, map
keys that are not strings), and each of those failed later, where nothing
expected it (one extension value in a schema once stopped the daemon).
Non-finite numbers cannot be written as JSON at all, so no provider could take
them.
"""

from __future__ import annotations

import math
from itertools import chain, compress
from typing import Any

import msgspec

from .messages import ProviderPart, Request, ToolCallPart

#: Levels a free-form JSON value may nest (the value itself is level 1).
MAX_NESTING = 64


#: Containers a value may hold for a problem in it to be located exactly; past this
#: the field alone is named (locating costs a walk in Python, the check itself not).
LOCATE_LIMIT = 10_000

_CONTAINER = frozenset({dict, list})
_DICT = frozenset({dict})
_LIST = frozenset({list})
_FLOAT = frozenset({float})
#: What a JSON value is made of, as msgspec decodes it.
_JSON = frozenset({dict, list, str, int, float, bool, type(None)})


def json_problem(value: Any, where: str, *, numbers: bool, max_depth: int = MAX_NESTING) -> str | None:
    """The first problem in `value`, as a sentence naming the place: a value JSON
    cannot hold, nesting deeper than `max_depth`, and with `numbers` a float that is
    not finite. Level by level, every step a C-level pass (a structure of a million
    nodes costs tens of milliseconds, not a second), and never recursive, so no input
    exhausts the stack."""
    kind, seen = _scan(value, numbers, max_depth)
    if kind is None:
        return None
    if seen <= LOCATE_LIMIT:
        found = _locate(value, where, numbers, max_depth)
        if found is not None:
            return found
    if kind == "nesting":
        return f"{where}: nested deeper than {max_depth} levels"
    if kind == "type":
        return (
            f"{where}: holds a value JSON cannot hold (only objects with string keys, arrays, strings, "
            "numbers, booleans and null)"
        )
    return f"{where}: holds a number that is not finite (NaN or infinity)"


def _scan(value: Any, numbers: bool, max_depth: int) -> tuple[str | None, int]:
    """(`type`, `nesting`, `number` or None, containers seen)."""
    if type(value) not in _JSON:
        return "type", 0
    if type(value) is float:
        return (None if not numbers or math.isfinite(value) else "number"), 0
    level = [value] if type(value) in _CONTAINER else []
    depth, seen = 1, 0
    while level:
        if depth > max_depth:
            return "nesting", seen
        seen += len(level)
        kinds = list(map(type, level))
        dicts = list(compress(level, map(_DICT.__contains__, kinds)))
        lists = compress(level, map(_LIST.__contains__, kinds))
        if dicts and not all(type(key) is str for key in chain.from_iterable(dicts)):
            return "type", seen
        values = list(chain(chain.from_iterable(map(dict.values, dicts)), chain.from_iterable(lists)))
        types = list(map(type, values))
        present = set(types)
        if not present <= _JSON:
            return "type", seen
        if (
            numbers
            and float in present
            and not all(map(math.isfinite, compress(values, map(_FLOAT.__contains__, types))))
        ):
            return "number", seen
        if dict in present or list in present:
            level = list(compress(values, map(_CONTAINER.__contains__, types)))
        else:
            level = []
        depth += 1
    return None, seen


def _locate(value: Any, where: str, numbers: bool, max_depth: int) -> str | None:
    """The place of the first problem, walked item by item (small values only)."""
    stack: list[tuple[Any, str, int]] = [(value, where, 1)]
    while stack:
        item, path, depth = stack.pop()
        t = type(item)
        if t is dict or t is list:
            if depth > max_depth:
                return f"{_short(path)}: nested deeper than {max_depth} levels"
            if t is dict:
                for key in item:
                    if type(key) is not str:
                        return f"{_short(path)}: has a key that is not a string ({_what(key)}); JSON keys are strings"
            pairs = item.items() if t is dict else enumerate(item)
            for key, inner in pairs:
                if type(inner) is not str and type(inner) is not int:
                    stack.append((inner, f"{path}.{key}" if t is dict else f"{path}[{key}]", depth + 1))
        elif t not in _JSON:
            return f"{_short(path)}: {_what(item)} is not a JSON value"
        elif t is float and numbers and not math.isfinite(item):
            return f"{_short(path)}: {item} is not a finite number"
    return None


def _what(value: Any) -> str:
    """A value JSON cannot hold, named as the msgpack type it came from."""
    if type(value) is msgspec.msgpack.Ext:
        return f"a msgpack extension value (type {value.code})"
    if type(value) in (bytes, bytearray, memoryview):
        return "a msgpack binary value"
    if type(value).__name__ == "datetime":
        return "a msgpack timestamp"
    if type(value) is tuple:
        return "an array"
    return f"a value of type {type(value).__name__}"


def free_form_fields(request: Request) -> list[tuple[Any, str]]:
    """Every free-form JSON value of `request`, with its place."""
    out: list[tuple[Any, str]] = [
        (options, f"provider_options.{name}") for name, options in request.provider_options.items()
    ]
    for i, tool in enumerate(request.tools):
        out.append((tool.parameters, f"tools[{i}].parameters"))
    if request.response_format is not None and request.response_format.schema is not None:
        out.append((request.response_format.schema, "response_format.schema"))
    for i, message in enumerate(request.messages):
        for j, part in enumerate(message.content):
            if type(part) is ToolCallPart and part.arguments:
                out.append((part.arguments, f"messages[{i}].content[{j}].arguments"))
            elif type(part) is ProviderPart:
                out.append((part.data, f"messages[{i}].content[{j}].data"))
    return out


def request_problem(request: Request, *, numbers: bool) -> str | None:
    """The first problem in the request's free-form JSON (see `json_problem`)."""
    for value, where in free_form_fields(request):
        found = json_problem(value, where, numbers=numbers)
        if found is not None:
            return found
    return None


def _short(path: str, keep: int = 100) -> str:
    return path if len(path) <= keep else path[:keep] + "..."
