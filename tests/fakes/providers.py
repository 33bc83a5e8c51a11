"""One scripted model, every provider: the cross-provider matrix's harnesses.

A test describes what the model does, turn by turn (`Turn`: text, tool calls,
reasoning, usage) or how it fails (`Failure`); each harness makes that happen
its own way: the mock through `provider_options.mock.turns`, a real provider
through its wire format served by a fake upstream on 127.0.0.1. A harness also
says what its provider was sent (`sent()`: the wire bodies, in order; empty
for the mock, which has no wire). Adding a provider to the matrix is adding a
harness here and its name to `HARNESSES`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from fakes.upstream import FakeUpstream, Recorded, Reply


@dataclass
class Turn:
    """What the model says in one turn. `usage`: canonical figures (input counts cached tokens)."""

    text: str = ""
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    reasoning: str = ""
    input_tokens: int = 120
    output_tokens: int = 30
    reasoning_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass
class Failure:
    status: int
    error_class: str
    message: str
    retry_after_s: float | None = None


class Harness:
    name = ""
    model = ""
    #: Whether the provider reports reasoning tokens itself (else the worker estimates them).
    reasoning_exact = True
    daemon: Any = None

    async def start(self, nursery: trio.Nursery, start_daemon: Callable[..., Awaitable[Any]]) -> Harness:
        raise NotImplementedError

    def script(self, *turns: Turn) -> dict[str, Any]:
        """Request fields (if any) making the model play `turns`, one per model call."""
        raise NotImplementedError

    def fail(self, failure: Failure) -> dict[str, Any]:
        raise NotImplementedError

    def sent(self) -> list[dict[str, Any]]:
        return []

    def options(self) -> tuple[dict[str, Any], Callable[[Any, list[dict[str, Any]]], None]]:
        """Provider options to pass through, and a check that they took effect (given
        the response and the wire bodies)."""
        raise NotImplementedError


class MockHarness(Harness):
    name = "mock"
    model = "mock:echo"

    async def start(self, nursery: trio.Nursery, start_daemon: Callable[..., Awaitable[Any]]) -> Harness:
        self.daemon = await start_daemon()
        return self

    def script(self, *turns: Turn) -> dict[str, Any]:
        return {"provider_options": {"mock": {"turns": [self._steps(t) for t in turns]}}}

    @staticmethod
    def _steps(turn: Turn) -> list[dict[str, Any]]:
        steps: list[dict[str, Any]] = []
        if turn.reasoning:
            steps += [{"reasoning": turn.reasoning}, {"signature": "mock-signature"}]
        # text in pieces, as a model streams it
        steps += [{"text": turn.text[i : i + 5]} for i in range(0, len(turn.text), 5)]
        steps += [{"tool_call": {"name": name, "arguments": args}} for name, args in turn.calls]
        steps.append({"usage": {"input_tokens": turn.input_tokens, "output_tokens": turn.output_tokens,
                                "reasoning_tokens": turn.reasoning_tokens,
                                "cache_read_tokens": turn.cache_read_tokens,
                                "cache_write_tokens": turn.cache_write_tokens}})
        steps.append({"finish": "tool_calls" if turn.calls else "stop"})
        return steps

    def fail(self, failure: Failure) -> dict[str, Any]:
        error = {"error_class": failure.error_class, "message": failure.message, "status": failure.status}
        if failure.retry_after_s is not None:
            error["retry_after"] = failure.retry_after_s
        return {"provider_options": {"mock": {"steps": [{"error": error}]}}}

    def options(self) -> tuple[dict[str, Any], Callable[[Any, list[dict[str, Any]]], None]]:
        def check(response: Any, sent: list[dict[str, Any]]) -> None:
            assert response.model == "echo-custom"

        return {"mock": {"model": "echo-custom"}}, check


ANTHROPIC_KEY = "fake-anthropic-key-never-to-be-seen-0123456789"


class AnthropicHarness(Harness):
    name = "anthropic"
    model = "anthropic:claude-sonnet-4-5"
    reasoning_exact = False  # Anthropic reports no thinking-token count: the worker estimates it

    async def start(self, nursery: trio.Nursery, start_daemon: Callable[..., Awaitable[Any]]) -> Harness:
        self.upstream = await FakeUpstream().start(nursery)
        self.daemon = await start_daemon({"providers": {"anthropic": {"base_url": self.upstream.base_url}}},
                                         env={"ANTHROPIC_API_KEY": ANTHROPIC_KEY})
        return self

    def script(self, *turns: Turn) -> dict[str, Any]:
        self._calls = 0
        self.upstream.route("POST", "/v1/messages", *[self._reply(t, n) for n, t in enumerate(turns)])
        return {}

    def fail(self, failure: Failure) -> dict[str, Any]:
        kinds = {"authentication": "authentication_error", "rate_limit": "rate_limit_error"}
        headers = {"retry-after": f"{failure.retry_after_s:g}"} if failure.retry_after_s is not None else {}
        body = {"type": "error", "error": {"type": kinds[failure.error_class], "message": failure.message}}
        self.upstream.route("POST", "/v1/messages", Reply.json(body, status=failure.status, headers=headers))
        return {"max_retries": 0}

    def sent(self) -> list[dict[str, Any]]:
        return [r.json() for r in self.upstream.sent("/v1/messages")]

    def options(self) -> tuple[dict[str, Any], Callable[[Any, list[dict[str, Any]]], None]]:
        def check(response: Any, sent: list[dict[str, Any]]) -> None:
            assert sent[-1]["metadata"] == {"user_id": "user-42"}
            assert sent[-1]["top_k"] == 5

        return {"anthropic": {"metadata": {"user_id": "user-42"}, "top_k": 5}}, check

    def _blocks(self, turn: Turn, n: int) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if turn.reasoning:
            blocks.append({"type": "thinking", "thinking": turn.reasoning, "signature": f"sig-{n}"})
        if turn.text:
            blocks.append({"type": "text", "text": turn.text})
        for i, (name, args) in enumerate(turn.calls):
            blocks.append({"type": "tool_use", "id": f"toolu_{n}_{i}", "name": name, "input": args})
        return blocks

    @staticmethod
    def _usage(turn: Turn) -> dict[str, Any]:
        return {"input_tokens": turn.input_tokens - turn.cache_read_tokens - turn.cache_write_tokens,
                "cache_read_input_tokens": turn.cache_read_tokens,
                "cache_creation_input_tokens": turn.cache_write_tokens, "output_tokens": turn.output_tokens}

    def _reply(self, turn: Turn, n: int) -> Callable[[Recorded], Reply]:
        stop = "tool_use" if turn.calls else "end_turn"
        blocks = self._blocks(turn, n)

        def reply(request: Recorded) -> Reply:
            if not request.json().get("stream"):
                return Reply.json({"id": f"msg_{n}", "type": "message", "role": "assistant",
                                   "model": "claude-sonnet-4-5", "content": blocks, "stop_reason": stop,
                                   "stop_sequence": None, "usage": self._usage(turn)})
            return Reply.sse(self._sse(blocks, stop, turn, n), chunk_size=64)

        return reply

    def _sse(self, blocks: list[dict[str, Any]], stop: str, turn: Turn, n: int) -> str:
        def event(kind: str, data: dict[str, Any]) -> str:
            return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

        start_usage = {**self._usage(turn), "output_tokens": 1}
        out = [event("message_start", {"message": {"id": f"msg_{n}", "type": "message", "role": "assistant",
                                                   "model": "claude-sonnet-4-5", "content": [],
                                                   "stop_reason": None, "stop_sequence": None,
                                                   "usage": start_usage}})]
        for index, block in enumerate(blocks):
            kind = block["type"]
            if kind == "text":
                out.append(event("content_block_start", {"index": index, "content_block": {"type": "text",
                                                                                         "text": ""}}))
                text = block["text"]
                for piece in (text[i : i + 5] for i in range(0, len(text), 5)):
                    out.append(event("content_block_delta", {"index": index, "delta": {"type": "text_delta",
                                                                                       "text": piece}}))
            elif kind == "thinking":
                out.append(event("content_block_start", {"index": index, "content_block": {
                    "type": "thinking", "thinking": "", "signature": ""}}))
                out.append(event("content_block_delta", {"index": index, "delta": {
                    "type": "thinking_delta", "thinking": block["thinking"]}}))
                out.append(event("content_block_delta", {"index": index, "delta": {
                    "type": "signature_delta", "signature": block["signature"]}}))
            else:
                out.append(event("content_block_start", {"index": index, "content_block": {
                    "type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}))
                raw = json.dumps(block["input"])
                for piece in (raw[i : i + 7] for i in range(0, len(raw), 7)):
                    out.append(event("content_block_delta", {"index": index, "delta": {
                        "type": "input_json_delta", "partial_json": piece}}))
            out.append(event("content_block_stop", {"index": index}))
        out.append(event("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None},
                                           "usage": {"output_tokens": turn.output_tokens}}))
        out.append(event("message_stop", {}))
        return "".join(out)


#: The providers the matrix runs on. OpenAI and Gemini join with a harness each.
HARNESSES: dict[str, type[Harness]] = {"mock": MockHarness, "anthropic": AnthropicHarness}
