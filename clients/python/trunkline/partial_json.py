"""The value a prefix of a JSON document already shows, for objects streamed as they are written.

`parse_partial('{"name": "Al')` is `{"name": "Al"}`: a string cut short is kept
as far as it goes, a key without its value yet is left out, and an unfinished
`true`/`null` or a number that cannot be read yet (`-`, `1.`) is left out. On a
whole document the result is exactly `json.loads`'s (complete strings and
numbers are handed to `json` itself). Text that cannot begin a JSON document
raises `ValueError`; nothing else is raised.
"""

from __future__ import annotations

import json
import re
from typing import Any

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_NUMBER_PREFIX = re.compile(r"-?(?:0|[1-9][0-9]*)?(?:(?<=[0-9])\.[0-9]*)?(?:(?<=[0-9])[eE][-+]?[0-9]*)?")
_CUT_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{0,3}|u[dD][89abAB][0-9a-fA-F]{2})?$")
_NUMBER_CHARS = re.compile(r"[-+.eE0-9]*")
_LITERALS = {"true": True, "false": False, "null": None}
_WS = re.compile(r"[ \t\n\r]*")
# A string's body up to its closing quote, a control character or the end of the text;
# the escapes themselves are checked by json.loads.
_STRING_BODY = re.compile(r'(?:[^"\\\x00-\x1f]|\\.)*', re.S)
# "this value had not begun or could not be read yet": distinct from a parsed null.
_MISSING = object()


class _Incomplete(Exception):
    """The text ended inside a value; `value` is what it shows so far (or _MISSING)."""

    def __init__(self, value: Any = _MISSING) -> None:
        self.value = value


def parse_partial(text: str) -> Any:
    """The value shown by `text`, a prefix of a JSON document. None when nothing
    has been shown yet (empty text, or a value just begun)."""
    end = len(text)
    i = _skip(text, 0)
    if i == end:
        return None
    try:
        value, i = _value(text, i)
    except _Incomplete as cut:
        return None if cut.value is _MISSING else cut.value
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if _skip(text, i) != end:
        raise ValueError(f"extra data after the JSON value at offset {i}")
    return value


def _skip(text: str, i: int) -> int:
    space = _WS.match(text, i)
    return space.end() if space else i


def _value(text: str, i: int) -> tuple[Any, int]:
    c = text[i]
    if c == "{":
        return _object(text, i + 1)
    if c == "[":
        return _array(text, i + 1)
    if c == '"':
        return _string(text, i)
    if c == "-" or c.isdigit():
        return _number(text, i)
    for word, value in _LITERALS.items():
        if text.startswith(word, i):
            return value, i + len(word)
        if word.startswith(text[i:]):
            raise _Incomplete()
    raise ValueError(f"unexpected {c!r} at offset {i}")


def _number(text: str, i: int) -> tuple[Any, int]:
    chars = _NUMBER_CHARS.match(text, i)
    run = chars.end() if chars else i
    match = _NUMBER.match(text, i)
    if run == len(text):
        # The number may go on in the next chunk; show it only if it reads as one now.
        if match is not None and match.end() == run:
            raise _Incomplete(_read_number(match.group()))
        if _NUMBER_PREFIX.fullmatch(text, i) is None:
            raise ValueError(f"bad number at offset {i}")
        raise _Incomplete()
    if match is None or match.end() != run:
        raise ValueError(f"bad number at offset {i}")
    return _read_number(match.group()), run


def _read_number(token: str) -> Any:
    # As json.loads reads them: int for integers, float for the rest.
    return float(token) if any(c in token for c in ".eE") else int(token)


def _string(text: str, i: int) -> tuple[str, int]:
    run = _STRING_BODY.match(text, i + 1)
    j = run.end() if run else i + 1
    if j < len(text) and text[j] == '"':
        if "\\" not in text[i + 1 : j]:
            return text[i + 1 : j], j + 1  # nothing to decode (the common case, and quicker)
        try:
            return json.loads(text[i : j + 1]), j + 1
        except ValueError as exc:
            raise ValueError(f"bad string at offset {i}: {exc}") from None
    if j < len(text) and not (text[j] == "\\" and j + 1 == len(text)):
        raise ValueError(f"control character in a string at offset {j}")
    # Cut short: keep what can be read, leaving out an escape not yet whole.
    body = text[i + 1 :]
    # (a high surrogate too: its pair may follow, itself perhaps cut short)
    while (tail := _CUT_ESCAPE.search(body)) is not None and _odd_backslashes(body, tail.start()):
        body = body[: tail.start()]
    try:
        raise _Incomplete(json.loads('"' + body + '"'))
    except ValueError:
        raise ValueError(f"bad string at offset {i}") from None


def _odd_backslashes(body: str, at: int) -> bool:
    """Whether the backslash at `at` starts an escape (is not itself escaped)."""
    n = 0
    while at - n - 1 >= 0 and body[at - n - 1] == "\\":
        n += 1
    return n % 2 == 0


def _array(text: str, i: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    end = len(text)
    i = _skip(text, i)
    if i == end:
        raise _Incomplete(out)
    if text[i] == "]":
        return out, i + 1
    while True:
        i = _skip(text, i)
        if i == end:
            raise _Incomplete(out)
        try:
            value, i = _value(text, i)
        except _Incomplete as cut:
            if cut.value is not _MISSING:
                out.append(cut.value)
            raise _Incomplete(out) from None
        out.append(value)
        i = _skip(text, i)
        if i == end:
            raise _Incomplete(out)
        if text[i] == "]":
            return out, i + 1
        if text[i] != ",":
            raise ValueError(f"expected ',' or ']' at offset {i}")
        i += 1


def _object(text: str, i: int) -> tuple[dict[str, Any], int]:
    out: dict[str, Any] = {}
    end = len(text)
    i = _skip(text, i)
    if i == end:
        raise _Incomplete(out)
    if text[i] == "}":
        return out, i + 1
    while True:
        i = _skip(text, i)
        if i == end:
            raise _Incomplete(out)
        if text[i] != '"':
            raise ValueError(f"expected a key at offset {i}")
        try:
            key, i = _string(text, i)
        except _Incomplete:
            raise _Incomplete(out) from None
        i = _skip(text, i)
        if i == end:
            raise _Incomplete(out)
        if text[i] != ":":
            raise ValueError(f"expected ':' at offset {i}")
        i = _skip(text, i + 1)
        if i == end:
            raise _Incomplete(out)
        try:
            value, i = _value(text, i)
        except _Incomplete as cut:
            if cut.value is not _MISSING:
                out[key] = cut.value
            raise _Incomplete(out) from None
        out[key] = value
        i = _skip(text, i)
        if i == end:
            raise _Incomplete(out)
        if text[i] == "}":
            return out, i + 1
        if text[i] != ",":
            raise ValueError(f"expected ',' or '}}' at offset {i}")
        i += 1


__all__ = ["parse_partial"]
