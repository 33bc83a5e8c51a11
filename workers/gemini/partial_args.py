"""Function-call arguments streamed piecewise by JSON path (`partialArgs`, Vertex on Gemini 3+).

Each fragment names a leaf (`$.recipe.ingredients[0].amount`) and a value; a
string may arrive in pieces (`willContinue`). `PartialArgs` assembles the
object, and at the same time writes it out as JSON text fragment by fragment,
so the pieces can be streamed as ordinary argument deltas whose concatenation
is the arguments' JSON. The assembled object is authoritative: should the
paths ever come out of document order, the text is still valid JSON of what
arrived, and the end event carries the object itself.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

_TOKEN = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]|\['((?:[^'\\]|\\.)*)'\]|\[\"((?:[^\"\\]|\\.)*)\"\]")

Path = tuple[str | int, ...]


def parse_path(path: str) -> Path | None:
    """`$.a.b[0]` -> ("a", "b", 0); None when it is not a path we can follow."""
    if not path.startswith("$"):
        return None
    out: list[str | int] = []
    pos = 1
    while pos < len(path):
        m = _TOKEN.match(path, pos)
        if m is None:
            return None
        if m.group(1) is not None:
            out.append(m.group(1))
        elif m.group(2) is not None:
            out.append(int(m.group(2)))
        else:
            out.append(m.group(3) if m.group(3) is not None else m.group(4))
        pos = m.end()
    return tuple(out) if out else None


def _fragment_value(fragment: dict[str, Any]) -> tuple[bool, Any]:
    """(is_string, value) of one partialArgs entry."""
    if "stringValue" in fragment:
        return True, str(fragment.get("stringValue") or "")
    if "numberValue" in fragment:
        return False, fragment["numberValue"]
    if "boolValue" in fragment:
        return False, bool(fragment["boolValue"])
    return False, None  # nullValue, or nothing


class PartialArgs:
    def __init__(self) -> None:
        self.value: dict[str, Any] = {}
        #: the containers the text is inside, below the root: (token, closing bracket)
        self._open: list[tuple[str | int, str]] = []
        self._members: list[bool] = [False]  # per open container (root first): has it a member yet
        self._string_at: Path | None = None  # the leaf whose string is still open in the text
        self._started = False
        self._continuing: Path | None = None  # the leaf whose next string fragment appends

    def feed(self, fragment: dict[str, Any]) -> str:
        """Take one fragment; the JSON text it adds."""
        path = parse_path(str(fragment.get("jsonPath") or ""))
        if path is None or not isinstance(path[0], str):  # arguments are an object: `$[0]` leads nowhere
            return ""
        is_string, value = _fragment_value(fragment)
        more = bool(fragment.get("willContinue")) and is_string
        appending = is_string and self._continuing == path
        self._store(path, value, appending)
        self._continuing = path if more else None
        return self._write(path, is_string, value, more, appending)

    def finish(self) -> str:
        """The text that closes everything still open."""
        if not self._started:
            return ""
        out = ['"'] if self._string_at is not None else []
        self._string_at = None
        out.extend(closer for _, closer in reversed(self._open))
        self._open.clear()
        del self._members[1:]
        out.append("}")
        self._started = False
        return "".join(out)

    # -- the object -------------------------------------------------------------

    def _store(self, path: Path, value: Any, appending: bool) -> None:
        node: Any = self.value
        for token, nxt in itertools.pairwise(path):
            fresh: Any = {} if isinstance(nxt, str) else []
            node = self._slot(node, token, fresh)
        leaf = path[-1]
        if appending:
            current = self._get(node, leaf)
            value = (current if isinstance(current, str) else "") + value
        self._set(node, leaf, value)

    @staticmethod
    def _slot(node: Any, token: str | int, fresh: Any) -> Any:
        if isinstance(token, str) and isinstance(node, dict):
            if not isinstance(node.get(token), (dict, list)):
                node[token] = fresh
            return node[token]
        if isinstance(token, int) and isinstance(node, list):
            while len(node) <= token:
                node.append(None)
            if not isinstance(node[token], (dict, list)):
                node[token] = fresh
            return node[token]
        return fresh  # a path that contradicts what came before: nowhere to keep it

    @staticmethod
    def _get(node: Any, token: str | int) -> Any:
        if isinstance(token, str) and isinstance(node, dict):
            return node.get(token)
        if isinstance(token, int) and isinstance(node, list) and token < len(node):
            return node[token]
        return None

    @staticmethod
    def _set(node: Any, token: str | int, value: Any) -> None:
        if isinstance(token, str) and isinstance(node, dict):
            node[token] = value
        elif isinstance(token, int) and isinstance(node, list):
            while len(node) <= token:
                node.append(None)
            node[token] = value

    # -- the text ---------------------------------------------------------------

    def _write(self, path: Path, is_string: bool, value: Any, more: bool, appending: bool) -> str:
        out: list[str] = []
        if appending and self._string_at == path:
            out.append(_escape(value))
            if not more:
                out.append('"')
                self._string_at = None
            return "".join(out)
        if not self._started:
            out.append("{")
            self._started = True
        if self._string_at is not None:
            out.append('"')
            self._string_at = None
        parents = path[:-1]
        common = 0
        while common < len(self._open) and common < len(parents) and self._open[common][0] == parents[common]:
            common += 1
        while len(self._open) > common:
            out.append(self._open.pop()[1])
            self._members.pop()
        for depth in range(common, len(parents)):
            out.append(self._member_prefix(parents[depth]))
            nested_object = isinstance(path[depth + 1], str)
            out.append("{" if nested_object else "[")
            self._open.append((parents[depth], "}" if nested_object else "]"))
            self._members.append(False)
        out.append(self._member_prefix(path[-1]))
        if is_string:
            out.append('"' + _escape(value))
            if more:
                self._string_at = path
            else:
                out.append('"')
        else:
            out.append(json.dumps(value))
        return "".join(out)

    def _member_prefix(self, token: str | int) -> str:
        sep = "," if self._members[-1] else ""
        self._members[-1] = True
        return sep + (json.dumps(token, ensure_ascii=False) + ":" if isinstance(token, str) else "")


def _escape(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]
