"""The worker's read path alone: CPU per reply through a real adapter, against httpx.

No sockets and no other process: the provider's bytes come from `httpx.MockTransport`
(the same bytes the fake upstream sends), so what is measured is only what the
worker does with a reply: read the body, decode it, parse the provider's JSON,
translate it into canonical events and frame each one for the link (the emitter,
with a sink that drops the frames). The floor is what any Python client pays for
the same reply: httpx reading the body line by line and `json.loads` on each event.

    python -m bench.read_path [--jobs N] [--chunks N] [--paced]

`--paced` hands the body over one SSE event per read, as a slowly streaming
provider does; the default is one read for the whole body, as the fake upstream's
burst arrives. Both columns run in the same process, alternately, so whatever
else the machine does falls on both alike.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import trio

from trunkline.config.loader import ProviderConfig, RetryPolicy, TimeoutPolicy
from trunkline.protocol.messages import Job, Message, ModelInfo, Request
from trunkline.workers._adapter import Call, Deadlines
from trunkline.workers._emit import Emitter
from trunkline.workers.anthropic.adapter import AnthropicAdapter
from trunkline.workers.openai_compat.adapter import OpenAICompatAdapter

from .upstream import AnthropicWire, OpenAIWire, shape_of, token_text

KINDS = ("openai", "anthropic")


def sse_parts(kind: str, chunks: int) -> list[bytes]:
    """The SSE events of one streamed reply, exactly as the fake upstream writes them."""
    wire: Any = AnthropicWire("bench") if kind == "anthropic" else OpenAIWire("bench")
    shape = shape_of(f"bench-c{chunks}")
    parts = [wire.first()] + [wire.content(token_text(i, shape, 0)) for i in range(chunks)] + [wire.last(chunks)]
    if kind == "anthropic":  # its first() and last() hold several events: one read per event when paced
        return [b"event:" + p for blob in parts for p in blob.split(b"event:") if p]
    return [b"data:" + p for blob in parts for p in blob.split(b"data:") if p]


def transport(kind: str, chunks: int, paced: bool) -> httpx.MockTransport:
    parts = sse_parts(kind, chunks)
    body = b"".join(parts)

    async def reads() -> AsyncIterator[bytes]:
        if paced:
            for p in parts:
                yield p
        else:
            yield body

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=reads())

    return httpx.MockTransport(handler)


def adapter_for(kind: str, chunks: int, paced: bool) -> Any:
    cls = AnthropicAdapter if kind == "anthropic" else OpenAICompatAdapter
    config = ProviderConfig(
        type="anthropic" if kind == "anthropic" else "openai_compat",
        base_url="http://upstream.invalid/v1" if kind == "openai" else "http://upstream.invalid",
    )
    adapter = cls("bench", config, RetryPolicy(), TimeoutPolicy(), transport=transport(kind, chunks, paced))
    adapter.api_key = "bench-key"
    return adapter


def job_for(kind: str, stream: bool) -> Job:
    request = Request(model="bench:bench", messages=[Message.user("Say hello.")], max_tokens=64)
    return Job(
        request_id="r",
        client_id="c",
        operation_id="op",
        stream=stream,
        request=request,
        model=ModelInfo(id="bench:bench", provider="bench", wire_name="bench"),
    )


async def trunkline_job(adapter: Any, job: Job) -> int:
    """One job as the worker's runtime runs it: the adapter's attempt and the emitter's framing."""
    frames = 0

    def sink(request_id: str, batch: list[bytes], seq: int, terminal: bool) -> None:
        nonlocal frames
        frames += len(batch)

    emitter = Emitter(job, "bench", sink, lambda provider_id: provider_id or "tu_x")
    call = Call(job, "bench", 1, job.operation_id, Deadlines(connect_s=5, request_s=60, stream_idle_s=30))
    if job.stream:
        emitter.finish(await adapter.stream(call, emitter.emit))
    else:
        emitter.complete(await adapter.complete(call))
    return frames


def floor_client(kind: str, chunks: int, paced: bool) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=transport(kind, chunks, paced))


async def floor_job(client: httpx.AsyncClient, kind: str) -> int:
    """What a plain client does with the same reply: read lines, parse each event's JSON."""
    events = 0
    path = "/messages" if kind == "anthropic" else "/chat/completions"
    url = "http://upstream.invalid/v1" + path
    async with client.stream("POST", url, content=b"{}") as response:
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                data = line[5:].strip()
                if data != "[DONE]":
                    json.loads(data)
                    events += 1
    return events


async def timed(n: int, one: Callable[[], Any]) -> float:
    """CPU seconds per call over `n` calls."""
    t0 = time.process_time()
    for _ in range(n):
        await one()
    return (time.process_time() - t0) / n


async def measure(kind: str, chunks: int, paced: bool, jobs: int, rounds: int = 5) -> dict[str, float]:
    adapter = adapter_for(kind, chunks, paced)
    client = floor_client(kind, chunks, paced)
    stream_job, whole_job = job_for(kind, True), job_for(kind, False)
    events = len(sse_parts(kind, chunks))
    best: dict[str, float] = {"trunkline_stream": 1e9, "trunkline_complete": 1e9, "floor": 1e9}
    for _ in range(2):  # warm-up: imports, pools, caches
        await trunkline_job(adapter, stream_job)
        await floor_job(client, kind)
    for _ in range(rounds):  # best of rounds: the least disturbed measurement of each
        best["floor"] = min(best["floor"], await timed(jobs, lambda: floor_job(client, kind)))
        best["trunkline_stream"] = min(
            best["trunkline_stream"], await timed(jobs, lambda: trunkline_job(adapter, stream_job))
        )
        best["trunkline_complete"] = min(
            best["trunkline_complete"], await timed(jobs, lambda: trunkline_job(adapter, whole_job))
        )
    await adapter.aclose()
    await client.aclose()
    us = {k: v * 1e6 for k, v in best.items()}
    return {
        "events": events,
        "floor_us": us["floor"],
        "stream_us": us["trunkline_stream"],
        "complete_us": us["trunkline_complete"],
        "floor_us_per_event": us["floor"] / events,
        "stream_us_per_event": us["trunkline_stream"] / events,
        "ratio": us["trunkline_stream"] / us["floor"],
    }


async def run(jobs: int, chunk_counts: tuple[int, ...], paced: bool) -> list[dict[str, Any]]:
    rows = []
    for kind in KINDS:
        for chunks in chunk_counts:
            row = await measure(kind, chunks, paced, jobs)
            rows.append({"kind": kind, "chunks": chunks, "paced": paced, **row})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        (
            "| provider | content chunks | reads | SSE events | floor (httpx + json) | trunkline stream | "
            "trunkline complete | floor / event | trunkline / event | ratio |"
        ),
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['kind']} | {r['chunks']} | {'one per event' if r['paced'] else 'one'} | {r['events']} | "
            f"{r['floor_us']:.0f} µs | {r['stream_us']:.0f} µs | {r['complete_us']:.0f} µs | "
            f"{r['floor_us_per_event']:.1f} µs | {r['stream_us_per_event']:.1f} µs | {r['ratio']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300, help="jobs per measurement (default %(default)s)")
    parser.add_argument("--chunks", type=int, nargs="+", default=[1, 50], help="content chunks per reply")
    parser.add_argument("--paced", action="store_true", help="one read per SSE event instead of one for all")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    rows = trio.run(run, args.jobs, tuple(args.chunks), args.paced)
    print(json.dumps(rows, indent=1) if args.json else table(rows))


if __name__ == "__main__":
    main()
