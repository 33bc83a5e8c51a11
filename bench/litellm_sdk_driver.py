"""The LiteLLM SDK peer: `litellm.acompletion` in its own process, from bench/.venv.

Run by the benchmark as `bench/.venv/bin/python bench/litellm_sdk_driver.py`; it
reads one JSON command per stdin line and answers one JSON line, and exits when
stdin closes. It imports nothing of trunkline or of the bench package, so
LiteLLM never meets the project's environment.

Commands:
    {"op": "hello"}
    {"op": "complete" | "stream", "model": "openai/...", "api_base": "...",
     "concurrency": N, "count": N, "duration_s": S, "warmup": N}
    {"op": "messages_complete" | "messages_stream", "model": "anthropic/...", "rust": true | false, ...}
Replies carry the samples (seconds), the wall time, errors, and this process's
CPU seconds and RSS for the timed part. The `messages_*` ops call Anthropic's
Messages API through `litellm.anthropic.messages.acreate`, on LiteLLM's Rust path
(`litellm.rust(True)`) or its Python one; a reply counts the calls LiteLLM says
Rust served (its `x-litellm-rust: true` response header), so a silent fallback to
Python shows.
"""

from __future__ import annotations

import os

# Before importing litellm: no network fetch of the cost map, no telemetry.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

import asyncio
import json
import sys
import time
from importlib.metadata import version

# Replies go on a private copy of stdout: LiteLLM prints warnings to stdout, which
# would corrupt the one-JSON-line-per-reply protocol.
_replies = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr

import litellm  # noqa: E402 - only once stdout is moved aside: it prints as it loads

MESSAGES = [{"role": "user", "content": "hi"}]


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu() -> float:
    t = os.times()
    return t.user + t.system


async def complete(cmd: dict) -> float:
    t0 = time.perf_counter()
    await litellm.acompletion(model=cmd["model"], messages=MESSAGES, api_base=cmd["api_base"], api_key="x")
    return time.perf_counter() - t0


async def stream(cmd: dict) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    first = 0.0
    chunks = 0
    response = await litellm.acompletion(
        model=cmd["model"],
        messages=MESSAGES,
        api_base=cmd["api_base"],
        api_key="x",
        stream=True,
        stream_options={"include_usage": True},
    )
    async for chunk in response:
        choices = chunk.choices
        if choices and choices[0].delta and choices[0].delta.content:
            chunks += 1
            if not first:
                first = time.perf_counter() - t0
    return first, time.perf_counter() - t0, chunks


served_by_rust = 0


def _note_rust(response: object) -> None:
    global served_by_rust
    hidden = getattr(response, "_hidden_params", None)
    if hidden is None and isinstance(response, dict):
        hidden = response.get("_hidden_params")
    headers = (hidden or {}).get("additional_headers") or {} if isinstance(hidden, dict) else {}
    if str(headers.get("x-litellm-rust", "")).lower() == "true":
        served_by_rust += 1


async def messages_complete(cmd: dict) -> float:
    t0 = time.perf_counter()
    response = await litellm.anthropic.messages.acreate(
        model=cmd["model"], messages=MESSAGES, max_tokens=1024, api_base=cmd["api_base"], api_key="x"
    )
    _note_rust(response)
    return time.perf_counter() - t0


async def messages_stream(cmd: dict) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    first = 0.0
    chunks = 0
    stream = await litellm.anthropic.messages.acreate(
        model=cmd["model"], messages=MESSAGES, max_tokens=1024, api_base=cmd["api_base"], api_key="x", stream=True
    )
    _note_rust(stream)
    async for event in stream:
        if isinstance(event, (bytes, bytearray)):  # the Python path hands back the raw SSE bytes
            text = event.count(b'"text_delta"')
        else:
            delta = event.get("delta") if isinstance(event, dict) else getattr(event, "delta", None)
            kind = delta.get("type") if isinstance(delta, dict) else getattr(delta, "type", None)
            text = int(kind == "text_delta")
        if text:
            chunks += text
            if not first:
                first = time.perf_counter() - t0
    return first, time.perf_counter() - t0, chunks


OPS = {
    "complete": complete,
    "stream": stream,
    "messages_complete": messages_complete,
    "messages_stream": messages_stream,
}


async def closed_loop(op, cmd: dict, count: int, duration_s: float) -> dict:
    samples: list = []
    errors = 0
    first_error = None
    started = 0
    deadline = time.perf_counter() + duration_s

    async def one_task() -> None:
        nonlocal started, errors, first_error
        while started < count and time.perf_counter() < deadline:
            started += 1
            try:
                samples.append(await op(cmd))
            except Exception as exc:  # noqa: BLE001 - any failure of the peer is counted, not raised
                errors += 1
                first_error = first_error or f"{type(exc).__name__}: {exc}"[:300]

    t0 = time.perf_counter()
    await asyncio.gather(*(one_task() for _ in range(cmd["concurrency"])))
    return {"samples": samples, "wall_s": time.perf_counter() - t0, "errors": errors, "first_error": first_error}


def priced(model: str) -> None:
    """Give a bench model a price, as a real Claude model has: LiteLLM's Python path
    otherwise logs a cost-map error with a traceback on every call, work no real call does."""
    name = model.split("/", 1)[-1]
    if name not in litellm.model_cost:
        litellm.register_model(
            {
                name: {
                    "litellm_provider": "anthropic",
                    "mode": "chat",
                    "max_tokens": 8192,
                    "input_cost_per_token": 3e-06,
                    "output_cost_per_token": 1.5e-05,
                }
            }
        )


async def run(cmd: dict) -> dict:
    global served_by_rust
    op = OPS[cmd["op"]]
    if cmd["op"].startswith("messages_"):
        priced(cmd["model"])
    litellm.rust(bool(cmd.get("rust")))
    if cmd.get("warmup"):
        await closed_loop(
            op, {**cmd, "concurrency": min(cmd["concurrency"], cmd["warmup"])}, cmd["warmup"], cmd["duration_s"]
        )
    served_by_rust = 0
    cpu0 = cpu()
    result = await closed_loop(op, cmd, cmd["count"], cmd["duration_s"])
    result["cpu_s"] = cpu() - cpu0
    result["served_by_rust"] = served_by_rust
    result["rss_mb"] = rss_mb()
    return result


async def main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = await reader.readline()
        if not line:
            return
        cmd = json.loads(line)
        if cmd["op"] == "hello":
            reply = {"version": version("litellm"), "pid": os.getpid(), "rss_mb": rss_mb()}
        else:
            reply = await run(cmd)
        _replies.write(json.dumps(reply) + "\n")
        _replies.flush()


if __name__ == "__main__":
    asyncio.run(main())
