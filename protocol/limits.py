"""Bounds on the free-form JSON a request may carry.

Most of a request has a fixed shape, but `provider_options`, tool `parameters`,
a response `schema` and the `arguments` of tool calls in the history are
arbitrary JSON. Unbounded nesting there would overflow the C stack of the
encoder further down the line (the supervisor re-encodes every request for its
worker), so it is refused as the message is read. Non-finite numbers cannot be
written as JSON at all, so no provider could take them.
"""

from __future__ import annotations

import math
from typing import Any

from .messages import Request, ToolCallPart

#: Levels a free-form JSON value may nest (the value itself is level 1).
MAX_NESTING = 64


def json_problem(value: Any, where: str, *, numbers: bool, max_depth: int = MAX_NESTING) -> str | None:
    """The first problem in `value`, as a sentence naming the place: nesting deeper
    than `max_depth`, and with `numbers` a float that is not finite. Iterative, so no
    input can exhaust the stack here."""
    inner_types = (dict, list, float) if numbers else (dict, list)
    stack: list[tuple[Any, str, int]] = [(value, where, 1)]
    while stack:
        item, path, depth = stack.pop()
        t = type(item)
        if t is dict:
            if depth > max_depth:
                return f"{_short(path)}: nested deeper than {max_depth} levels"
            for key, inner in item.items():
                if type(inner) in inner_types:
                    stack.append((inner, f"{path}.{key}", depth + 1))
        elif t is list:
            if depth > max_depth:
                return f"{_short(path)}: nested deeper than {max_depth} levels"
            for i, inner in enumerate(item):
                if type(inner) in inner_types:
                    stack.append((inner, f"{path}[{i}]", depth + 1))
        elif t is float and not math.isfinite(item):
            return f"{_short(path)}: {item} is not a finite number"
    return None


def free_form_fields(request: Request) -> list[tuple[Any, str]]:
    """Every free-form JSON value of `request`, with its place."""
    out: list[tuple[Any, str]] = [(request.provider_options, "provider_options")]
    for i, tool in enumerate(request.tools):
        out.append((tool.parameters, f"tools[{i}].parameters"))
    if request.response_format is not None and request.response_format.schema is not None:
        out.append((request.response_format.schema, "response_format.schema"))
    for i, message in enumerate(request.messages):
        for j, part in enumerate(message.content):
            if type(part) is ToolCallPart and part.arguments:
                out.append((part.arguments, f"messages[{i}].content[{j}].arguments"))
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
