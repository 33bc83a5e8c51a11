"""Sans-IO decoders for streamed HTTP bodies: server-sent events and NDJSON.

Bytes in, events (or lines) out; no I/O, and any chunking of the same bytes
gives the same result: a chunk may end inside a line, inside a UTF-8
character, or between the CR and LF of a line ending. Text is decoded only
once a whole line is buffered, with replacement characters for invalid
UTF-8, so no input can raise.

SSE follows the WHATWG parsing rules (CRLF, LF or lone CR line endings; `:`
comments; one optional space after the colon; `data` lines joined by
newlines; an event without `data` is not dispatched), with one leniency real
servers need: `flush()` at the end of the body dispatches an event whose
terminating blank line never came.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class SseEvent:
    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None


class _Lines:
    """Splits bytes into lines ending in CRLF, LF or CR, across chunk boundaries."""

    __slots__ = ("_buf", "_pending_cr")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pending_cr = False  # the last chunk ended in CR: a following LF belongs to it

    def feed(self, chunk: bytes) -> list[bytes]:
        if self._pending_cr:
            self._pending_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if not chunk:
            return []
        buf = self._buf
        start = len(buf)
        buf += chunk
        if b"\r" not in chunk:
            # The common case (LF only): split without looking at CRs.
            end = buf.rfind(b"\n")
            if end < start:
                return []
            lines = bytes(buf[:end]).split(b"\n")
            del buf[: end + 1]
            return lines
        lines = []
        pos = 0
        n = len(buf)
        while pos < n:
            lf = buf.find(b"\n", pos)
            cr = buf.find(b"\r", pos)
            if cr == -1 and lf == -1:
                break
            if cr == -1 or (lf != -1 and lf < cr):
                lines.append(bytes(buf[pos:lf]))
                pos = lf + 1
            else:
                lines.append(bytes(buf[pos:cr]))
                if cr + 1 < n:
                    pos = cr + 2 if buf[cr + 1] == 0x0A else cr + 1
                else:
                    pos = cr + 1
                    self._pending_cr = True
        del buf[:pos]
        return lines

    def rest(self) -> bytes:
        rest = bytes(self._buf)
        self._buf.clear()
        self._pending_cr = False
        return rest


class SseDecoder:
    """Split a server-sent-events byte stream into events."""

    def __init__(self) -> None:
        self._lines = _Lines()
        self._data: list[str] = []
        self._has_data = False
        self._event = ""
        self._id: str | None = None
        self._retry: int | None = None
        self._first = True

    def feed(self, chunk: bytes) -> list[SseEvent]:
        out: list[SseEvent] = []
        for line in self._lines.feed(chunk):
            self._line(line, out)
        return out

    def flush(self) -> list[SseEvent]:
        """At the end of the body: the last line and any event left without its blank line."""
        out: list[SseEvent] = []
        rest = self._lines.rest()
        if rest:
            self._line(rest, out)
        self._dispatch(out)
        return out

    def _line(self, raw: bytes, out: list[SseEvent]) -> None:
        if self._first:
            self._first = False
            if raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
        if not raw:
            self._dispatch(out)
            return
        if raw[0] == 0x3A:  # ":" starts a comment
            return
        colon = raw.find(b":")
        if colon == -1:
            name, value = raw, b""
        else:
            name, value = raw[:colon], raw[colon + 1 :]
            if value[:1] == b" ":
                value = value[1:]
        if name == b"data":
            self._data.append(value.decode("utf-8", "replace"))
            self._has_data = True
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id":
            if b"\x00" not in value:
                self._id = value.decode("utf-8", "replace")
        elif name == b"retry":
            if value.isdigit():
                self._retry = int(value)

    def _dispatch(self, out: list[SseEvent]) -> None:
        if self._has_data:
            out.append(SseEvent(self._event or "message", "\n".join(self._data), self._id, self._retry))
        self._data = []
        self._has_data = False
        self._event = ""
        self._retry = None


class NdjsonDecoder:
    """Split newline-delimited JSON into lines (bytes, line ending removed, blank lines skipped).

    The JSON itself is left to the caller. `flush()` returns a last line that had
    no newline: how a server that answers with one unterminated object is read."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        buf = self._buf
        start = len(buf)
        buf += chunk
        end = buf.rfind(b"\n")
        if end < start:
            return []
        lines = bytes(buf[:end]).split(b"\n")
        del buf[: end + 1]
        return [line.rstrip(b"\r") for line in lines if line.strip()]

    def flush(self) -> list[bytes]:
        rest = bytes(self._buf).strip()
        self._buf.clear()
        return [rest] if rest else []
