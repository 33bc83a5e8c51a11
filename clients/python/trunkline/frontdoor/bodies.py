"""Reading a client's JSON body into msgspec Structs of the API's own request shape.

Every endpoint can use these: `convert` turns what does not fit the shape into the
door's refusal, naming the field as the APIs' own errors do (`param` is
`messages[0].content[1].type`, and so is the sentence); `split_data_url` takes a
`data:` URL apart, since the canonical form carries inline media as base64 `data`
with its `media_type`, never as a URL (providers take URLs as links to fetch).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from .errors import HttpError, refuse

T = TypeVar("T")

_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<name>[^`]*)`$")
_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]*)`$")
_INVALID = re.compile(r"^Invalid (?:enum )?value (?P<value>.*)$")
_EXPECTED = re.compile(r"^Expected `(?P<want>[^`]*)`, got `(?P<got>[^`]*)`$")
#: msgspec's names for JSON's types, as the APIs' documentation names them.
_JSON_NAMES = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean",
    "array": "an array",
    "object": "an object",
    "null": "null",
}


def convert(body: Any, shape: type[T], unknown: Callable[[str], str] | None = None) -> T:
    """`body` (decoded JSON) as `shape`, or the refusal saying where it does not fit.
    `unknown(path)` words the refusal of a field the shape does not know."""
    try:
        return msgspec.convert(body, shape)
    except msgspec.ValidationError as exc:
        raise refusal(str(exc), unknown) from None


def refusal(message: str, unknown: Callable[[str], str] | None = None) -> HttpError:
    """msgspec's `... - at `$.a[0].b`` as a sentence that names the field, with the
    field as `param`."""
    at = _AT.match(message)
    what, path = (at.group("what"), (at.group("path") or "").lstrip(".")) if at else (message, "")
    if (m := _UNKNOWN.match(what)) is not None:
        field = _join(path, m.group("name"))
        return refuse(unknown(field) if unknown else f"unknown field `{field}`", param=field)
    if (m := _MISSING.match(what)) is not None:
        field = _join(path, m.group("name"))
        return refuse(f"`{field}` is required", param=field)
    if not path:
        if what.startswith("Expected `object`"):
            return refuse("the request body must be a JSON object")
        return refuse(f"the request body does not fit: {what}")
    if (m := _INVALID.match(what)) is not None:
        return refuse(f"`{path}` may not be {m.group('value')}", param=path)
    if (m := _EXPECTED.match(what)) is not None:
        want = " or ".join(_JSON_NAMES.get(t, t) for t in m.group("want").split(" | "))
        return refuse(f"`{path}` must be {want}, not {_JSON_NAMES.get(m.group('got'), m.group('got'))}", param=path)
    return refuse(f"`{path}`: {what[:1].lower()}{what[1:]}", param=path)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def split_data_url(url: str, where: str) -> tuple[str, str] | None:
    """(media type, base64 data) of a `data:` URL; None for any other URL. A data URL
    that is not `data:<media type>;base64,<data>` is refused, naming `where`."""
    if url[:5].lower() != "data:":
        return None
    head, comma, data = url.partition(",")
    media_type, _, encoding = head[5:].partition(";")
    if not comma or encoding.lower() != "base64" or not media_type:
        raise refuse(f"`{where}`: a data: URL must be data:<media type>;base64,<data>", param=where)
    return media_type.lower(), data
