"""The LiteLLM SDK peer: `litellm.acompletion` in its own process, from bench/.venv.

Run by the benchmark as `bench/.venv/bin/python bench/litellm_sdk_driver.py`; it
reads one JSON command per stdin line and answers one JSON line, and exits when
stdin closes. It imports nothing of trunkline or of the bench package, so
LiteLLM never meets the project's environment.

Commands:
    {"op": "hello"}
    {"op": "complete" | "stream", "model": "openai/...", "api_base": "...",
     "concurrency": N, "count": N, "duration_s": S, "warmup": N}
Replies carry the samples (seconds), the wall time, errors, and this process's
CPU seconds and RSS for the timed part.
"""

from __future__ import annotations

import os

# Before importing litellm: no network fetch of the cost map, no telemetry.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")

import asyncio  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from importlib.metadata import version  # noqa: E402

import litellm  # noqa: E402

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
    response = await litellm.acompletion(model=cmd["model"], messages=MESSAGES, api_base=cmd["api_base"],
                                         api_key="x", stream=True, stream_options={"include_usage": True})
    async for chunk in response:
        choices = chunk.choices
        if choices and choices[0].delta and choices[0].delta.content:
            chunks += 1
            if not first:
                first = time.perf_counter() - t0
    return first, time.perf_counter() - t0, chunks


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
            except Exception as exc:  # noqa: BLE001
                errors += 1
                first_error = first_error or f"{type(exc).__name__}: {exc}"[:300]

    t0 = time.perf_counter()
    await asyncio.gather(*(one_task() for _ in range(cmd["concurrency"])))
    return {"samples": samples, "wall_s": time.perf_counter() - t0, "errors": errors, "first_error": first_error}


async def run(cmd: dict) -> dict:
    op = complete if cmd["op"] == "complete" else stream
    if cmd.get("warmup"):
        await closed_loop(op, {**cmd, "concurrency": min(cmd["concurrency"], cmd["warmup"])},
                          cmd["warmup"], cmd["duration_s"])
    cpu0 = cpu()
    result = await closed_loop(op, cmd, cmd["count"], cmd["duration_s"])
    result["cpu_s"] = cpu() - cpu0
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
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
