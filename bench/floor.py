"""The floor: a plain httpx client in the benchmark process calling an HTTP endpoint.

Pointed at the fake upstream it is the physical floor every other system is
compared with: the least work a Python program can do to make the call. The
same client pointed at the LiteLLM proxy drives the proxy, so the proxy's
figures are "floor client + proxy" exactly as trunkline's are "trunkline client
+ supervisor + worker".

The floor parses what it receives (the JSON reply, each SSE chunk) because a
real caller must, and because trunkline's worker does the same work.
"""

from __future__ import annotations

import json
import time

import httpx

PROMPT = [{"role": "user", "content": "hi"}]


class HttpTarget:
    def __init__(self, base_url: str, headers: dict[str, str] | None = None, max_connections: int = 1200) -> None:
        self.base_url = base_url.rstrip("/")
        # The same pool size as the trunkline worker's in the benchmark config, so
        # neither side queues for connections where the other does not.
        self.client = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            timeout=httpx.Timeout(120.0),
            headers={"content-type": "application/json", **(headers or {})},
        )
        self._bodies: dict[tuple[str, str, bool], bytes] = {}

    def _body(self, kind: str, model: str, stream: bool) -> bytes:
        key = (kind, model, stream)
        body = self._bodies.get(key)
        if body is None:
            obj: dict[str, object] = {"model": model, "messages": PROMPT}
            if kind == "anthropic":
                obj["max_tokens"] = 1024
            if stream:
                obj["stream"] = True
                if kind == "openai":
                    obj["stream_options"] = {"include_usage": True}
            body = self._bodies[key] = json.dumps(obj).encode()
        return body

    def _path(self, kind: str) -> str:
        return "/messages" if kind == "anthropic" else "/chat/completions"

    async def complete(self, model: str, kind: str = "openai") -> float:
        t0 = time.perf_counter()
        response = await self.client.post(self.base_url + self._path(kind), content=self._body(kind, model, False))
        response.raise_for_status()
        response.json()
        return time.perf_counter() - t0

    async def complete_text(self, model: str) -> tuple[int, int, str]:
        """For the hop trace: the send and receive clocks (CLOCK_MONOTONIC ns) and the text."""
        t_send = time.monotonic_ns()
        response = await self.client.post(
            self.base_url + "/chat/completions", content=self._body("openai", model, False)
        )
        t_recv = time.monotonic_ns()
        return t_send, t_recv, response.json()["choices"][0]["message"]["content"]

    async def stream(self, model: str, kind: str = "openai") -> tuple[float, float, int]:
        """(time to first token, time to the complete response, content chunks)."""
        t0 = time.perf_counter()
        first = 0.0
        chunks = 0
        async with self.client.stream(
            "POST", self.base_url + self._path(kind), content=self._body(kind, model, True)
        ) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    break
                if _has_text(json.loads(data), kind):
                    chunks += 1
                    if not first:
                        first = time.perf_counter() - t0
        return first, time.perf_counter() - t0, chunks

    async def stream_trace(self, model: str) -> tuple[int, list[tuple[int, str]], int]:
        """For the hop trace: send clock, (receive clock, text) per content chunk, done clock."""
        t_send = time.monotonic_ns()
        texts: list[tuple[int, str]] = []
        async with self.client.stream(
            "POST", self.base_url + "/chat/completions", content=self._body("openai", model, True)
        ) as response:
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                if line[6:] == "[DONE]":
                    break
                chunk = json.loads(line[6:])
                choices = chunk.get("choices") or []
                text = choices[0].get("delta", {}).get("content") if choices else None
                if text:
                    texts.append((time.monotonic_ns(), text))
        return t_send, texts, time.monotonic_ns()

    async def aclose(self) -> None:
        await self.client.aclose()


def _has_text(chunk: dict, kind: str) -> bool:
    if kind == "anthropic":
        return chunk.get("type") == "content_block_delta"
    choices = chunk.get("choices")
    return bool(choices and choices[0].get("delta", {}).get("content"))
