"""A provider's response body, decompressed a bounded piece at a time and counted.

httpx inflates each received chunk whole: 64 KiB of a gzip bomb can become
64 MiB in one call, before anyone can count it. So workers read the raw bytes
and inflate them here with `max_length`, never producing more than `PIECE`
bytes at once, and stop as soon as the decompressed total passes the limit.
Pure: bytes in, bytes out, no I/O.
"""

from __future__ import annotations

import zlib
from typing import Protocol

from .errors import ProviderError

#: Most bytes one inflate step may produce.
PIECE = 64 * 1024


def too_large(what: str, limit: int) -> ProviderError:
    return ProviderError(
        "invalid_response",
        f"{what} sent a response larger than limits.max_response_bytes "
        f"({limit} bytes, counted decompressed); the rest was not read",
    )


class BodyDecoder:
    """Raw (possibly compressed) chunks in, decompressed pieces out, with a running
    count that may never pass `limit`."""

    __slots__ = ("_inflate", "_what", "limit", "total")

    def __init__(self, content_encoding: str | None, limit: int, what: str = "the provider") -> None:
        self._what = what
        self.limit = limit
        self.total = 0
        encoding = (content_encoding or "identity").strip().lower()
        self._inflate: _Inflater | None
        if encoding in ("identity", ""):
            self._inflate = None
        elif encoding in ("gzip", "x-gzip"):
            self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self._inflate = _Deflate()
        else:
            # We only ask for gzip and deflate.
            raise ProviderError(
                "invalid_response", f"{what} sent a body in an encoding we did not ask for: {content_encoding!r}"
            )

    @property
    def plain(self) -> bool:
        """Nothing to inflate: each chunk is its own piece (a reader may count it itself)."""
        return self._inflate is None

    @property
    def over(self) -> bool:
        """The body went past the limit: what `feed` returned is all there will be."""
        return self.total > self.limit

    def check(self) -> None:
        """Raise once the body has gone past the limit (after its pieces up to there were used)."""
        if self.total > self.limit:
            raise too_large(self._what, self.limit)

    def feed(self, chunk: bytes) -> list[bytes]:
        """The decompressed pieces of `chunk`, up to the limit: past it, what fits is
        returned and `over` is set (call `check` once they are used)."""
        self.check()
        if self._inflate is None:
            return self._keep([chunk]) if chunk else []
        out: list[bytes] = []
        data = chunk
        try:
            while data and self.total + sum(map(len, out)) <= self.limit:
                piece = self._inflate.decompress(data, PIECE)
                if piece:
                    out.append(piece)
                data = self._inflate.unconsumed_tail
                if not piece and data:  # pragma: no cover - zlib always progresses with room left
                    break
        except zlib.error as exc:
            raise ProviderError(
                "invalid_response", f"{self._what} sent a compressed body that could not be decompressed: {exc}"
            ) from None
        return self._keep(out)

    def _keep(self, pieces: list[bytes]) -> list[bytes]:
        room = self.limit - self.total
        out: list[bytes] = []
        for piece in pieces:
            if len(piece) > room:
                if room > 0:
                    out.append(piece[:room])
                self.total = self.limit + 1
                return out
            out.append(piece)
            room -= len(piece)
            self.total += len(piece)
        return out

    def flush(self) -> list[bytes]:
        self.check()
        if self._inflate is None:
            return []
        try:
            rest = self._inflate.flush(PIECE)
        except zlib.error as exc:
            raise ProviderError(
                "invalid_response", f"{self._what} sent a compressed body that could not be decompressed: {exc}"
            ) from None
        return self._keep([rest]) if rest else []


class _Inflater(Protocol):
    """A zlib decompressor, or `_Deflate`."""

    @property
    def unconsumed_tail(self) -> bytes: ...

    def decompress(self, data: bytes, max_length: int, /) -> bytes: ...

    def flush(self, length: int, /) -> bytes: ...


class _Deflate:
    """HTTP `deflate` is meant to be zlib-wrapped, yet some servers send it raw: the
    first bytes decide, as browsers and httpx do."""

    __slots__ = ("_first", "_obj")

    def __init__(self) -> None:
        self._obj = zlib.decompressobj()
        self._first = True

    @property
    def unconsumed_tail(self) -> bytes:
        return self._obj.unconsumed_tail

    def decompress(self, data: bytes, max_length: int) -> bytes:
        if self._first:
            self._first = False
            try:
                return self._obj.decompress(data, max_length)
            except zlib.error:
                self._obj = zlib.decompressobj(-zlib.MAX_WBITS)
        return self._obj.decompress(data, max_length)

    def flush(self, length: int) -> bytes:
        return self._obj.flush(length)
