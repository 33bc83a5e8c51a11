"""Sans-IO decoders for streamed HTTP bodies: server-sent events and NDJSON.

Bytes in, events (or lines) out; no I/O, and any chunking of the same bytes
gives the same result: a chunk may end inside a line, inside a UTF-8
character, or between the CR and LF of a line ending. Bytes are decoded only
once a whole line is buffered, with replacement characters for invalid UTF-8,
so no input can raise. Each chunk is scanned once; only the unterminated tail
is kept, so a line arriving a byte at a time costs linear, not quadratic, time.

SSE follows the WHATWG parsing rules (CRLF, LF or lone CR line endings; a BOM
at the start of the stream is dropped; `:` comments; one optional space after
the colon; `data` lines joined by newlines; `id` with NUL ignored; an event
without any `data` line is not dispatched), with two departures that suit a
client reading one response body rather than a reconnecting EventSource:

- `id` and `retry` belong to the event they appear in (`None` when absent)
  instead of persisting as connection state;
- `flush()` at the end of the body parses an unterminated last line and
  dispatches an event whose terminating blank line never came, where the
  spec would discard it (real servers end streams that way).

NDJSON lines are split on LF only (a CR before it is dropped); blank lines are
skipped and the JSON is left to the caller.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BOM = b"\xef\xbb\xbf"


@dataclass(slots=True, frozen=True)
class SseEvent:
    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None


class _Lines:
    """Splits bytes into lines ending in CRLF, LF or a lone CR, across chunk boundaries."""

    __slots__ = ("_buf", "_cr")

    def __init__(self) -> None:
        self._buf = bytearray()  # the unterminated tail: never holds a CR or LF between feeds
        self._cr = False  # the last chunk ended in CR: an LF starting the next one belongs to it

    def feed(self, chunk: bytes) -> list[bytes]:
        if self._cr and chunk:
            self._cr = False
            if chunk[0] == 0x0A:
                chunk = chunk[1:]
        buf = self._buf
        start = len(buf)  # the tail has been scanned already
        buf += chunk
        end = max(buf.rfind(b"\n", start), buf.rfind(b"\r", start))
        if end < 0:
            return []
        self._cr = chunk.endswith(b"\r")
        head = bytes(buf[: end + 1])
        del buf[: end + 1]
        # bytes.splitlines breaks on exactly CRLF, LF and CR (unlike str's, not
        # on NEL or U+2028), and `head` ends in a line ending: no empty last item.
        return head.splitlines()

    def rest(self) -> bytes:
        rest = bytes(self._buf)
        self._buf.clear()
        self._cr = False
        return rest


#: One dispatched event as the decoders hand it on: (event type, data bytes, id, retry).
#: The data stays bytes: the JSON decoders take bytes, and decoding it to text first
#: would cost a copy per event.
RawEvent = tuple[str, bytes, "str | None", "int | None"]


class SseDecoder:
    """Bytes in, events out. No I/O; any chunking gives the same events.

    Two paths, one result. While no CR has been seen, a body is cut into whole
    events at each blank line (`\n\n`) and the usual event (one `data:` line,
    perhaps after one `event:` line) is taken apart without looking at its lines
    one by one; any other event goes through the line parser. A stream that uses CR
    line endings switches for good to the line parser, which handles every form.
    """

    __slots__ = ("_data", "_event", "_fast", "_id", "_lines", "_names", "_retry", "_start", "_tail")

    def __init__(self) -> None:
        self._lines = _Lines()
        self._start = True  # no line seen yet: the next may begin with a BOM
        self._tail = bytearray()  # the fast path's unfinished event: starts at an event boundary
        self._fast = True
        self._names: dict[bytes, str] = {}
        self._reset()

    def feed(self, chunk: bytes) -> list[SseEvent]:
        return [_event(raw) for raw in self.feed_raw(chunk)]

    def flush(self) -> list[SseEvent]:
        """End of body: parse the unterminated last line, dispatch a pending event, reset."""
        return [_event(raw) for raw in self.flush_raw()]

    def feed_raw(self, chunk: bytes) -> list[RawEvent]:
        if not self._fast:
            return self._parse(self._lines.feed(chunk))
        if b"\r" in chunk:
            self._fast = False
            rest = bytes(self._tail)
            self._tail.clear()
            return self._parse(self._lines.feed(rest + chunk))
        tail = self._tail
        searched = max(len(tail) - 1, 0)  # a blank line may straddle the old tail and the chunk
        tail += chunk
        if self._start:
            if len(tail) < 3 and _BOM.startswith(bytes(tail)):
                return []
            self._start = False
            if tail.startswith(_BOM):
                del tail[:3]
        # The old tail holds no blank line (it was cut after the last one), so the last
        # one now, if any, ends at or after `searched`: one backward scan finds it.
        end = tail.rfind(b"\n\n", searched)
        if end < 0:
            return []
        head = bytes(tail[:end])
        del tail[: end + 2]
        out: list[RawEvent] = []
        for block in head.split(b"\n\n"):
            if block.startswith(b"data: ") and b"\n" not in block:
                out.append(("message", block[6:], None, None))
                continue
            if block.startswith(b"event: "):
                nl = block.find(b"\n")
                if nl > 0 and block.startswith(b"data: ", nl + 1) and block.find(b"\n", nl + 1) < 0:
                    name = block[7:nl]
                    text = self._names.get(name)
                    if text is None:
                        text = name.decode("utf-8", "replace") or "message"
                        if len(self._names) < 64:
                            self._names[name] = text
                    out.append((text, block[nl + 7 :], None, None))
                    continue
            if block:
                out += self._parse([*block.split(b"\n"), b""])
        return out

    def flush_raw(self) -> list[RawEvent]:
        """End of body, as `flush`."""
        out: list[RawEvent] = []
        if self._tail:
            out += self._parse(self._lines.feed(bytes(self._tail)))
            self._tail.clear()
        rest = self._lines.rest()
        if rest:
            out += self._parse([rest])
        if self._data:
            out.append(self._dispatch())
        self._reset()
        self._start = True
        self._fast = True
        return out

    def _reset(self) -> None:
        # Raw bytes until dispatch: decoding once per event is cheaper, and the
        # same as decoding per line since an invalid sequence cannot span an LF.
        self._data: list[bytes] = []
        self._event = b""
        self._id: bytes | None = None
        self._retry: int | None = None

    def _dispatch(self) -> RawEvent:
        return (
            self._event.decode("utf-8", "replace") or "message",
            b"\n".join(self._data),
            None if self._id is None else self._id.decode("utf-8", "replace"),
            self._retry,
        )

    def _parse(self, lines: list[bytes]) -> list[RawEvent]:
        out: list[RawEvent] = []
        if lines and self._start:
            self._start = False
            if lines[0].startswith(_BOM):
                lines[0] = lines[0][3:]
        for line in lines:
            if not line:
                if self._data:
                    out.append(self._dispatch())
                self._reset()
                continue
            colon = line.find(b":")
            if colon == 0:
                continue
            if colon < 0:
                name, value = line, b""
            else:
                name = line[:colon]
                value = line[colon + 2 :] if line[colon + 1 : colon + 2] == b" " else line[colon + 1 :]
            if name == b"data":
                self._data.append(value)
            elif name == b"event":
                self._event = value
            elif name == b"id":
                if b"\x00" not in value:
                    self._id = value
            elif name == b"retry" and value.isdigit():  # ASCII digits only, for bytes
                self._retry = int(value)
        return out


def excerpt(data: bytes | str, size: int = 200) -> str:
    """The start of an event's data, as text, for an error message."""
    if isinstance(data, bytes):
        return data[:size].decode("utf-8", "replace")
    return data[:size]


def _event(raw: RawEvent) -> SseEvent:
    event, data, id_, retry = raw
    return SseEvent(event, data.decode("utf-8", "replace"), id_, retry)


class NdjsonDecoder:
    """Newline-delimited JSON split into lines (bytes, without the line ending, whitespace-only lines skipped)."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()  # the unterminated tail: never holds an LF between feeds

    def feed(self, chunk: bytes) -> list[bytes]:
        buf = self._buf
        if buf:
            start = len(buf)
            buf += chunk
            end = buf.rfind(b"\n", start)
            if end < 0:
                return []
            head = bytes(buf[:end])
            del buf[: end + 1]
        else:  # the usual chunk: it starts a line, so no copy through the buffer
            end = chunk.rfind(b"\n")
            if end < 0:
                buf += chunk
                return []
            head = chunk[:end]
            if end + 1 < len(chunk):
                buf += chunk[end + 1 :]
        if b"\n" not in head:  # one line, as a server usually writes them
            line = head.removesuffix(b"\r")
            return [line] if line and not line.isspace() else []
        return [line.removesuffix(b"\r") for line in head.split(b"\n") if line.strip()]

    def flush(self) -> list[bytes]:
        """End of body: the unterminated last line, e.g. a whole reply sent as one object."""
        rest = bytes(self._buf)
        self._buf.clear()
        return [rest.removesuffix(b"\r")] if rest.strip() else []


_STRUCTURAL = re.compile(rb'["\\{}\[\]]')


class JsonArrayDecoder:
    """The objects of one streamed JSON array (`[{...}\n,\r\n{...}]`), each as the bytes of
    one complete object, as soon as its last byte arrives.

    Works on bytes: every structural character is ASCII and never occurs inside a
    multi-byte UTF-8 sequence, so a chunk may end anywhere. Each byte is scanned once.
    Between objects everything (whitespace, commas, the array's brackets) is skipped,
    so a lone object (an error body) comes out as one element too.
    """

    __slots__ = ("_buf", "_depth", "_escape", "_in_string", "_pos")

    def __init__(self) -> None:
        self._buf = bytearray()  # the object in progress, from its `{`
        self._pos = 0  # next byte of _buf to scan
        self._depth = 0  # nesting inside the object in progress (0: between objects)
        self._in_string = False
        self._escape = False

    def feed(self, chunk: bytes) -> list[bytes]:
        if self._depth == 0:
            brace = chunk.find(b"{")
            if brace < 0:
                return []
            chunk = chunk[brace:]
        buf = self._buf
        buf += chunk
        n = len(buf)
        pos, depth, in_string = self._pos, self._depth, self._in_string
        if pos >= n:
            return []
        skip = pos if self._escape else -1  # the byte after a backslash, which means itself
        start = 0
        out: list[bytes] = []
        # Only quotes, backslashes and brackets matter: the regex skips everything else in C.
        for m in _STRUCTURAL.finditer(buf, pos):
            i = m.start()
            if i == skip:
                continue
            c = buf[i]
            if depth == 0:
                if c == 0x7B:  # {
                    start, depth = i, 1
            elif in_string:
                if c == 0x5C:  # backslash
                    skip = i + 1
                elif c == 0x22:  # quote
                    in_string = False
            elif c == 0x22:
                in_string = True
            elif c == 0x7B or c == 0x5B:  # { [
                depth += 1
            elif c == 0x7D or c == 0x5D:  # } ]
                depth -= 1
                if depth == 0:
                    out.append(bytes(buf[start : i + 1]))
        self._escape = skip == n  # a backslash ended the chunk: the next byte is escaped
        if depth == 0:
            buf.clear()
            n = 0
        elif start:
            del buf[:start]
            n -= start
        self._pos, self._depth, self._in_string = n, depth, in_string
        return out

    def flush(self) -> list[bytes]:
        """End of body: an object never closed is incomplete and is dropped (the caller
        notices the stream ended early)."""
        self._buf.clear()
        self._pos, self._depth, self._in_string, self._escape = 0, 0, False, False
        return []
