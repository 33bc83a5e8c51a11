"""The SP wire format that nng speaks, as pure functions: no sockets, no event loop.

The daemon speaks nng's protocols to its clients (Rep0 on the control
endpoint, Pub0 on the event endpoint) with its own socket code instead of
libnng: every send and receive through libnng crosses into nng's threads and
back, which cost more than the rest of a small request (docs/ARCHITECTURE.md).
Clients see no difference: this is the same wire.

A connection opens with an 8-byte header from each side: ``\\0 S P \\0``, the
sender's protocol number (16 bits, big-endian), two zero bytes. Then each
message is framed, over ipc, by a type byte (1) and a 64-bit big-endian length;
over tcp by the length alone. A Req0 message starts with its backtrace:
32-bit big-endian words, the last (the request id) with its top bit set; the
reply carries the same words back.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

PAIR1 = 0x11
PUB0 = 0x20
SUB0 = 0x21
REQ0 = 0x30
REP0 = 0x31

NAMES = {PAIR1: "pair1", PUB0: "pub0", SUB0: "sub0", REQ0: "req0", REP0: "rep0"}

IPC_PATH_MAX = 107  # sun_path is 108 bytes with the terminating NUL
HANDSHAKE_SIZE = 8
#: A Rep0 socket follows at most this many hops of a backtrace (nng's default max TTL).
MAX_HOPS = 8
#: How much of an oversized message is kept: enough for any backtrace.
OVERSIZE_PREFIX = 4 * MAX_HOPS

_U64 = struct.Struct(">Q")
_IPC_HEAD = struct.Struct(">BQ")


class WireError(Exception):
    """The peer does not speak the expected protocol: drop the connection."""


def handshake(protocol: int) -> bytes:
    return b"\x00SP\x00" + protocol.to_bytes(2, "big") + b"\x00\x00"


def peer_protocol(header: bytes) -> int:
    """The protocol number in a peer's handshake header."""
    if len(header) != HANDSHAKE_SIZE or header[:4] != b"\x00SP\x00" or header[6:] != b"\x00\x00":
        raise WireError(f"not an SP handshake: {bytes(header[:HANDSHAKE_SIZE])!r}")
    return int.from_bytes(header[4:6], "big")


def frame_ipc(payload: bytes) -> bytes:
    return _IPC_HEAD.pack(1, len(payload)) + payload


def frame_tcp(payload: bytes) -> bytes:
    return _U64.pack(len(payload)) + payload


@dataclass(frozen=True, slots=True)
class Oversize:
    """A message larger than the reader's limit: it was skipped, not buffered. Its
    first bytes are kept (a request's backtrace, so it can still be answered)."""

    prefix: bytes
    size: int


class FrameReader:
    """Bytes in, whole messages out, whatever the chunking.

    With `expect` set, the first 8 bytes must be a handshake from that protocol.
    A message over `max_size` (0: no limit) is skipped as it arrives and reported
    as `Oversize`, so a huge message costs no memory. With `accept` set (a
    subscriber's topics), only messages starting with one of those prefixes are
    returned; the others are never copied."""

    __slots__ = ("ipc", "max_size", "expect", "accept", "_buf", "_skip", "_head_size")

    def __init__(self, *, ipc: bool, max_size: int = 0, expect: int | None = None,
                 accept: tuple[bytes, ...] | None = None) -> None:
        self.ipc = ipc
        self.max_size = max_size
        self.expect = expect
        self.accept = accept
        self._buf = bytearray()
        self._skip = 0
        self._head_size = 9 if ipc else 8

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes | Oversize]:
        """Messages complete with `data`; what it holds of the next one is copied, so
        `data` may be a buffer the caller reuses. With `accept`, `data` must not be a
        memoryview (the prefix test needs `startswith`)."""
        out: list[bytes | Oversize] = []
        if self._skip:
            n = min(self._skip, len(data))
            self._skip -= n
            data = data[n:]
        if self._buf:
            self._buf += data
            src: bytes | bytearray | memoryview = self._buf
        else:
            src = data  # the common case: parse the received bytes in place
        pos = 0
        if self.expect is not None:
            if len(src) < HANDSHAKE_SIZE:
                self._keep(src, 0)
                return out
            got = peer_protocol(bytes(src[:HANDSHAKE_SIZE]))
            if got != self.expect:
                raise WireError(f"peer speaks {NAMES.get(got, hex(got))}, expected {NAMES[self.expect]}")
            self.expect = None
            pos = HANDSHAKE_SIZE
        end = len(src)
        head_size = self._head_size
        limit = self.max_size
        ipc = self.ipc
        accept = self.accept
        with memoryview(src) as view:
            while end - pos >= head_size:
                if ipc:
                    kind, size = _IPC_HEAD.unpack_from(src, pos)
                    if kind != 1:
                        raise WireError(f"unknown message type {kind}")
                else:
                    (size,) = _U64.unpack_from(src, pos)
                start = pos + head_size
                if limit and size > limit:
                    keep = min(OVERSIZE_PREFIX, size)
                    if end - start < keep:
                        break  # wait for the prefix
                    out.append(Oversize(bytes(view[start : start + keep]), size))
                    have = min(size, end - start)
                    pos = start + have
                    self._skip = size - have
                    continue
                if end - start < size:
                    break
                pos = start + size
                if accept is None or src.startswith(accept, start, pos):
                    out.append(bytes(view[start:pos]))
        self._keep(src, pos)
        return out

    def _keep(self, src: bytes | bytearray | memoryview, pos: int) -> None:
        """Hold what follows `pos` (part of a message) for the next feed."""
        if src is self._buf:
            if pos:
                del self._buf[:pos]
        elif pos < len(src):
            self._buf = bytearray(src[pos:])

    @property
    def buffered(self) -> int:
        """Bytes held while waiting for the rest of a message."""
        return len(self._buf)


def split_backtrace(payload: bytes) -> tuple[bytes, bytes] | None:
    """(backtrace, body) of a request as a Rep0 socket receives it; None for one that
    went through more hops than allowed (dropped, as nng does). A message too short
    to hold its backtrace is garbage: `WireError`."""
    pos = 0
    for _ in range(MAX_HOPS):
        if len(payload) - pos < 4:
            raise WireError("request too short for its backtrace")
        last = payload[pos] & 0x80
        pos += 4
        if last:
            return payload[:pos], payload[pos:]
    return None


def split_url(url: str) -> tuple[str, str]:
    """('ipc', path) or ('tcp', 'host:port'); anything else is refused with a reason."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("ipc", "tcp", "tcp4", "tcp6"):
        raise ValueError(f"unsupported endpoint {url!r}: use ipc://PATH or tcp://HOST:PORT")
    if scheme == "ipc":
        if len(rest.encode()) > IPC_PATH_MAX:
            raise ValueError(f"ipc path too long ({len(rest.encode())} bytes, max {IPC_PATH_MAX}): {rest}")
        return "ipc", rest
    return "tcp", rest


def tcp_address(rest: str) -> tuple[str, int]:
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"tcp endpoint needs HOST:PORT, got {rest!r}")
    host = host.strip("[]")
    return ("" if host in ("*", "") else host), int(port)
