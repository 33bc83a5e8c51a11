"""The fake LLM provider every system in the benchmark calls: one process on 127.0.0.1.

It speaks just enough of two wire protocols to be a believable upstream:

* OpenAI Chat Completions, `POST /v1/chat/completions`: a JSON reply, or with
  `"stream": true` an SSE stream of content chunks, a finish chunk, a usage
  chunk and `data: [DONE]`;
* Anthropic Messages, `POST /v1/messages`: JSON, or the SSE event sequence
  from `message_start` to `message_stop`;
* `GET /v1/models` (the workers probe local servers) and `GET /stats`.

The shape of a reply is chosen by the *model name*, because it is the one field
every system under test passes through unchanged (trunkline, the LiteLLM SDK
and the proxy alike). The name is split on `-`; these tokens are understood:

    c<N>   stream N content chunks (default 50)
    d<MS>  wait MS milliseconds between chunks (default 0: the whole stream in one write)
    h<S>   after the first chunk, hold the stream open for S seconds (or until the
           client goes away), then finish it: the "slow stream" of the memory test
    t      trace: the content carries this server's CLOCK_MONOTONIC timestamps,
           `R<ns>` when the request was read and `S<ns>` when each chunk was written

so `bench-c50-d0` is a 50-chunk burst and `gpt-4o-mini` gets the defaults.

Plain asyncio protocols and hand-rolled HTTP/1.1 (keep-alive, Content-Length
request bodies, chunked replies): no framework, standard library only, so the
same file runs from the project's venv and from the peers' venv, and it stays
far faster than any client in the benchmark (`upstream_capacity.py` measures it).
The process exits when its stdin closes, so it never outlives the benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from dataclasses import dataclass

CREATED = 1_700_000_000
PROMPT_TOKENS = 12


@dataclass(frozen=True, slots=True)
class Shape:
    chunks: int = 50
    delay_s: float = 0.0
    hold_s: float = 0.0
    trace: bool = False


_shapes: dict[str, Shape] = {}


def shape_of(model: str) -> Shape:
    shape = _shapes.get(model)
    if shape is None:
        chunks, delay, hold, trace = 50, 0.0, 0.0, False
        for token in model.rsplit("/", 1)[-1].split("-"):
            head, rest = token[:1], token[1:]
            try:
                if head == "c" and rest:
                    chunks = int(rest)
                elif head == "d" and rest:
                    delay = float(rest) / 1000
                elif head == "h" and rest:
                    hold = float(rest)
                elif token == "t":
                    trace = True
            except ValueError:
                pass
        shape = _shapes[model] = Shape(chunks, delay, hold, trace)
    return shape


def _json(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def http_json(body: bytes, status: str = "200 OK") -> bytes:
    return f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n".encode() + body


SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
CHUNKED_END = b"0\r\n\r\n"


def http_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def token_text(i: int, shape: Shape, recv_ns: int) -> str:
    if not shape.trace:
        return f"tok{i} "
    now = time.monotonic_ns()
    return f"R{recv_ns}S{now}|" if i == 0 else f"S{now}|"


# -- OpenAI Chat Completions ------------------------------------------------------------


class OpenAIWire:
    def __init__(self, model: str) -> None:
        self.model = model
        self._chunk_prefix = _json(
            {
                "id": "chatcmpl-bench",
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": model,
                "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": None}],
            }
        )
        # Splice the content into a pre-encoded chunk: json.dumps per chunk would make
        # this server, not the systems under test, the thing being measured.
        self._before, _, self._after = self._chunk_prefix.partition(b'"content":""')

    def reply(self, text: str, completion_tokens: int) -> bytes:
        return http_json(
            _json(
                {
                    "id": "chatcmpl-bench",
                    "object": "chat.completion",
                    "created": CREATED,
                    "model": self.model,
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                    ],
                    "usage": {
                        "prompt_tokens": PROMPT_TOKENS,
                        "completion_tokens": completion_tokens,
                        "total_tokens": PROMPT_TOKENS + completion_tokens,
                    },
                }
            )
        )

    def first(self) -> bytes:
        return (
            b"data: "
            + _json(
                {
                    "id": "chatcmpl-bench",
                    "object": "chat.completion.chunk",
                    "created": CREATED,
                    "model": self.model,
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
                }
            )
            + b"\n\n"
        )

    def content(self, text: str) -> bytes:
        return b"data: " + self._before + b'"content":' + _json(text) + self._after + b"\n\n"

    def last(self, n: int) -> bytes:
        finish = _json(
            {
                "id": "chatcmpl-bench",
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": self.model,
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            }
        )
        usage = _json(
            {
                "id": "chatcmpl-bench",
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": self.model,
                "choices": [],
                "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": n, "total_tokens": PROMPT_TOKENS + n},
            }
        )
        return b"data: " + finish + b"\n\ndata: " + usage + b"\n\ndata: [DONE]\n\n"


# -- Anthropic Messages ----------------------------------------------------------------------


class AnthropicWire:
    def __init__(self, model: str) -> None:
        self.model = model

    def reply(self, text: str, completion_tokens: int) -> bytes:
        return http_json(
            _json(
                {
                    "id": "msg_bench",
                    "type": "message",
                    "role": "assistant",
                    "model": self.model,
                    "content": [{"type": "text", "text": text}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": PROMPT_TOKENS, "output_tokens": completion_tokens},
                }
            )
        )

    def first(self) -> bytes:
        start = {
            "type": "message_start",
            "message": {
                "id": "msg_bench",
                "type": "message",
                "role": "assistant",
                "model": self.model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": PROMPT_TOKENS, "output_tokens": 1},
            },
        }
        block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
        return (
            b"event: message_start\ndata: " + _json(start) + b"\n\n"
            b"event: content_block_start\ndata: " + _json(block) + b"\n\n"
        )

    def content(self, text: str) -> bytes:
        return (
            b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
            b'"delta":{"type":"text_delta","text":' + _json(text) + b"}}\n\n"
        )

    def last(self, n: int) -> bytes:
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": n},
        }
        return (
            b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
            b"event: message_delta\ndata: " + _json(delta) + b"\n\n"
            b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
        )


_wires: dict[tuple[str, str], OpenAIWire | AnthropicWire] = {}
_burst_cache: dict[tuple[str, str], bytes] = {}


def wire_for(path: str, model: str) -> OpenAIWire | AnthropicWire:
    key = (path, model)
    wire = _wires.get(key)
    if wire is None:
        wire = _wires[key] = (AnthropicWire if path.endswith("/messages") else OpenAIWire)(model)
    return wire


MODELS_REPLY = http_json(_json({"object": "list", "data": [{"id": "gpt-4o-mini", "object": "model"}]}))
NOT_FOUND = http_json(_json({"error": {"message": "no such route", "type": "not_found"}}), "404 Not Found")


class Stats:
    requests = 0
    streams = 0
    chunks = 0
    open_streams = 0


class Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; requests are answered in order."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.busy = False  # a paced stream is being written; later requests wait for it
        self.lost: asyncio.Future[None] | None = None
        self.transport: asyncio.Transport | None = None
        self.pacing: asyncio.Future[None] | None = None  # the paced stream being written

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.lost = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.lost is not None and not self.lost.done():
            self.lost.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self.parse()

    def parse(self) -> None:
        buf = self.buf
        while not self.busy:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    length = int(value)
                elif name == "transfer-encoding":
                    # No client in the benchmark sends chunked bodies; say so rather than guess.
                    self.transport.write(
                        http_json(
                            b'{"error":"chunked request bodies are not supported"}',  # type: ignore[union-attr]
                            "411 Length Required",
                        )
                    )
                    self.transport.close()  # type: ignore[union-attr]
                    return
            total = end + 4 + length
            if len(buf) < total:
                return
            body = bytes(buf[end + 4 : total])
            del buf[:total]
            self.handle(method, target.split("?", 1)[0], body, time.monotonic_ns())

    def handle(self, method: str, path: str, body: bytes, recv_ns: int) -> None:
        t = self.transport
        assert t is not None
        Stats.requests += 1
        if method == "GET":
            if path.endswith("/models"):
                t.write(MODELS_REPLY)
            elif path == "/stats":
                t.write(
                    http_json(
                        _json(
                            {
                                "requests": Stats.requests,
                                "streams": Stats.streams,
                                "chunks": Stats.chunks,
                                "open_streams": Stats.open_streams,
                            }
                        )
                    )
                )
            else:
                t.write(NOT_FOUND)
            return
        if method != "POST" or not path.endswith(("/chat/completions", "/messages")):
            t.write(NOT_FOUND)
            return
        try:
            request = json.loads(body)
            model = str(request.get("model", ""))
        except (ValueError, AttributeError):
            t.write(
                http_json(b'{"error":{"message":"body is not JSON","type":"invalid_request_error"}}', "400 Bad Request")
            )
            return
        wire = wire_for(path, model)
        shape = shape_of(model)
        if not request.get("stream"):
            text = f"R{recv_ns}S{time.monotonic_ns()}|" if shape.trace else "hello from the fake upstream"
            t.write(wire.reply(text, 5))
            return
        Stats.streams += 1
        Stats.chunks += shape.chunks
        if shape.delay_s or shape.hold_s:
            self.busy = True
            self.pacing = asyncio.ensure_future(self.paced(wire, shape, recv_ns))  # held: the loop keeps weak refs
            return
        key = (path, model)
        burst = None if shape.trace else _burst_cache.get(key)
        if burst is None:
            parts = [wire.first()] + [wire.content(token_text(i, shape, recv_ns)) for i in range(shape.chunks)]
            parts.append(wire.last(shape.chunks))
            burst = SSE_HEAD + b"".join(http_chunk(p) for p in parts) + CHUNKED_END
            if not shape.trace:
                _burst_cache[key] = burst
        t.write(burst)

    async def paced(self, wire: OpenAIWire | AnthropicWire, shape: Shape, recv_ns: int) -> None:
        t = self.transport
        assert t is not None
        assert self.lost is not None
        Stats.open_streams += 1
        try:
            t.write(SSE_HEAD + http_chunk(wire.first()))
            for i in range(shape.chunks):
                if i and shape.delay_s:
                    await asyncio.sleep(shape.delay_s)
                if t.is_closing():
                    return
                t.write(http_chunk(wire.content(token_text(i, shape, recv_ns))))
                if i == 0 and shape.hold_s:
                    # Wait for the hold to pass or the client to leave, whichever is first.
                    await asyncio.wait([self.lost], timeout=shape.hold_s)
                    if self.lost.done():
                        return
            if not t.is_closing():
                t.write(http_chunk(wire.last(shape.chunks)) + CHUNKED_END)
        finally:
            Stats.open_streams -= 1
            self.busy = False
        if self.buf and not t.is_closing():
            self.parse()


def _exit_when_stdin_closes() -> None:
    try:
        while sys.stdin.buffer.read(4096):
            pass
    finally:
        import os

        os._exit(0)


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Connection, host, port, backlog=4096, reuse_address=True)
    bound = server.sockets[0].getsockname()[1]
    print(f"PORT {bound}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    threading.Thread(target=_exit_when_stdin_closes, daemon=True).start()
    asyncio.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
