"""RESP2, the Redis wire format, as pure functions: commands out, replies in.

No I/O here (`redis_client.py` owns the socket). The decoder takes bytes in any
chunking and yields whole replies; malformed input raises `RespError` and nothing
else, whatever the bytes, so a confused or hostile peer costs a reconnect, never
an unexpected exception in the supervisor.
"""

from __future__ import annotations

#: Bulk strings and arrays larger than Redis' own limits are refused rather than buffered.
MAX_BULK_BYTES = 512 * 1024 * 1024
MAX_ARRAY_ITEMS = 1 << 24
#: Replies nest only as deep as scripts make them; deeper is garbage, refused before recursion runs out.
MAX_DEPTH = 32
#: A line (status, error, integer, a length) longer than this without its CRLF is garbage.
MAX_LINE_BYTES = 64 * 1024


class RespError(Exception):
    """The peer sent something that is not RESP2: the connection cannot be trusted further."""


class ErrorReply:
    """A Redis error reply (`-ERR ...`), a value like any other reply so that one
    command's error in a pipeline does not hide the others' results."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message

    @property
    def code(self) -> str:
        """The error's first word (`ERR`, `NOSCRIPT`, `WRONGTYPE`...)."""
        return self.message.split(" ", 1)[0]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ErrorReply) and other.message == self.message

    def __hash__(self) -> int:
        return hash(self.message)

    def __repr__(self) -> str:
        return f"ErrorReply({self.message!r})"


#: A decoded reply: a status (str), a bulk string (bytes), an integer, a null (None),
#: an error, or an array of replies.
Reply = str | bytes | int | None | ErrorReply | list["Reply"]

Arg = bytes | str | int | float


def _arg(value: Arg) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bool):  # a bool is an int to Python; Redis would read "True"
        raise TypeError("a command argument cannot be a bool")
    if isinstance(value, int):
        return b"%d" % value
    return repr(value).encode()


def encode_command(*args: Arg) -> bytes:
    """One command as RESP2: an array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = _arg(arg)
        out.append(b"$%d\r\n" % len(data))
        out.append(data)
        out.append(b"\r\n")
    return b"".join(out)


def encode_commands(commands: list[tuple[Arg, ...]]) -> bytes:
    """Several commands written back to back (a pipeline)."""
    return b"".join(encode_command(*command) for command in commands)


class NeedMore:
    """What `Decoder.next` returns while a reply has not wholly arrived."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_MORE"


NEED_MORE = NeedMore()


class _Incomplete(Exception):
    """Not all of the reply has arrived yet (internal: the decoder waits for more)."""


_INCOMPLETE = _Incomplete()


class Decoder:
    """Replies from a byte stream fed in any chunks: `feed`, then `next` until it
    returns `NEED_MORE`."""

    __slots__ = ("_buf", "_pos")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0

    def feed(self, data: bytes | bytearray) -> None:
        if self._pos:
            # What was decoded already is dropped before growing the buffer.
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def next(self) -> Reply | NeedMore:
        """The next whole reply, or `NEED_MORE`; raises `RespError` on input that is not RESP2."""
        try:
            reply, end = self._parse(self._pos, 0)
        except _Incomplete:
            return NEED_MORE
        self._pos = end
        return reply

    def _line(self, start: int) -> tuple[bytes, int]:
        buf = self._buf
        end = buf.find(b"\r\n", start, start + MAX_LINE_BYTES + 2)
        if end < 0:
            if len(buf) - start > MAX_LINE_BYTES + 1:
                raise RespError(f"a line longer than {MAX_LINE_BYTES} bytes")
            raise _INCOMPLETE
        return bytes(buf[start:end]), end + 2

    def _integer(self, start: int) -> tuple[int, int]:
        line, end = self._line(start)
        digits = line[1:] if line[:1] == b"-" else line
        if not digits or not digits.isdigit() or len(digits) > 20:
            raise RespError(f"not an integer: {line[:40]!r}")
        return int(line), end

    def _parse(self, pos: int, depth: int) -> tuple[Reply, int]:
        buf = self._buf
        if pos >= len(buf):
            raise _INCOMPLETE
        kind = buf[pos]
        if kind == 0x2B:  # + status
            line, end = self._line(pos + 1)
            return line.decode("utf-8", "replace"), end
        if kind == 0x2D:  # - error
            line, end = self._line(pos + 1)
            return ErrorReply(line.decode("utf-8", "replace")), end
        if kind == 0x3A:  # : integer
            return self._integer(pos + 1)
        if kind == 0x24:  # $ bulk string
            size, start = self._integer(pos + 1)
            if size == -1:
                return None, start
            if size < 0 or size > MAX_BULK_BYTES:
                raise RespError(f"bulk string of length {size}")
            end = start + size
            if len(buf) < end + 2:
                raise _INCOMPLETE
            if buf[end : end + 2] != b"\r\n":
                raise RespError("a bulk string not followed by CRLF")
            return bytes(buf[start:end]), end + 2
        if kind == 0x2A:  # * array
            count, at = self._integer(pos + 1)
            if count == -1:
                return None, at
            if count < 0 or count > MAX_ARRAY_ITEMS:
                raise RespError(f"array of length {count}")
            if depth >= MAX_DEPTH:
                raise RespError(f"arrays nested deeper than {MAX_DEPTH}")
            items: list[Reply] = []
            for _ in range(count):
                item, at = self._parse(at, depth + 1)
                items.append(item)
            return items, at
        raise RespError(f"unknown reply type byte 0x{kind:02x}")
