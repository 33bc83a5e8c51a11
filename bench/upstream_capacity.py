"""How fast the fake upstream is, measured with a client lighter than any under test.

Raw keep-alive HTTP/1.1 over asyncio streams (no HTTP library, no JSON
parsing), several connections in one process. The benchmark runs it in its own
process and reads the upstream's CPU from /proc meanwhile: the upstream's CPU
per request is what bounds its capacity, whatever this client manages.

    python -m bench.upstream_capacity --port P --seconds 2 --connections 16 --kind json|sse
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time


async def one_connection(port: int, request: bytes, deadline: float, counts: list[int], sse: bool) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.perf_counter() < deadline:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            if sse:
                await reader.readuntil(b"\r\n0\r\n\r\n")  # the end of the chunked body
            else:
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
            counts[0] += 1
    finally:
        writer.close()


async def main(port: int, seconds: float, connections: int, kind: str, chunks: int) -> None:
    body = json.dumps(
        {"model": f"bench-c{chunks}", "messages": [{"role": "user", "content": "hi"}], "stream": kind == "sse"}
    ).encode()
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body
    counts = [0]
    t0 = time.perf_counter()
    await asyncio.gather(
        *(one_connection(port, request, t0 + seconds, counts, kind == "sse") for _ in range(connections))
    )
    wall = time.perf_counter() - t0
    print(json.dumps({"requests": counts[0], "wall_s": wall, "chunks_per_request": chunks if kind == "sse" else 0}))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--kind", choices=["json", "sse"], default="json")
    p.add_argument("--chunks", type=int, default=50)
    a = p.parse_args()
    asyncio.run(main(a.port, a.seconds, a.connections, a.kind, a.chunks))
