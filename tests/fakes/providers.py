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
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from fakes import chat_completions as cc
from fakes import gemini_stream as gs
from fakes import ollama_chat as ol
from fakes import openai_responses as oa
from fakes.upstream import FakeUpstream, Recorded, Reply
from helpers import DaemonProcess


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
    #: Whether the provider reports the tokens written to its cache.
    reports_cache_writes = True
    #: Whether the model has a price (a local model has none: its cost is unknown, not 0).
    priced = True
    #: The API key the daemon holds (it must never show in an error).
    key = ""
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

    def forget(self) -> None:
        """Forget what was sent so far (one daemon serves many tests)."""
        upstream = getattr(self, "upstream", None)
        if upstream is not None:
            upstream.requests.clear()

    def options(self) -> tuple[dict[str, Any], Callable[[Any, list[dict[str, Any]]], None]]:
        """Provider options to pass through, and a check that they took effect (given
        the response and the wire bodies)."""
        raise NotImplementedError

    # Where things sit in a wire body (real providers only: the mock sends none).

    def call_id(self, turn: int, index: int) -> str:
        """The id the fake gave the `index`th call of model turn `turn`."""
        raise NotImplementedError

    def conversation(self, body: dict[str, Any]) -> list[Any]:
        """The body's conversation entries (messages, input items or contents), in order."""
        raise NotImplementedError

    def max_tokens(self, body: dict[str, Any]) -> int:
        raise NotImplementedError

    def images(self, body: dict[str, Any]) -> list[Any]:
        """The images of the first user turn, as sent."""
        raise NotImplementedError

    def tool_calls(self, body: dict[str, Any]) -> list[str]:
        """The wire ids of the tool calls in the history, in order."""
        raise NotImplementedError

    def tool_results(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        """(call id, text) of each tool result in the history, in order."""
        raise NotImplementedError

    def last_turn(self, body: dict[str, Any]) -> dict[str, Any]:
        """`body` holding only its last turn (a user message; OpenAI: the trailing results)."""
        raise NotImplementedError

    def output_schema(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The JSON Schema the body asks the provider's native structured output to follow."""
        raise NotImplementedError

    def check_cache(self, first: dict[str, Any], second: dict[str, Any]) -> None:
        """That two turns were sent so the provider can cache the first's prompt for the second."""
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
        steps.append(
            {
                "usage": {
                    "input_tokens": turn.input_tokens,
                    "output_tokens": turn.output_tokens,
                    "reasoning_tokens": turn.reasoning_tokens,
                    "cache_read_tokens": turn.cache_read_tokens,
                    "cache_write_tokens": turn.cache_write_tokens,
                }
            }
        )
        steps.append({"finish": "tool_calls" if turn.calls else "stop"})
        return steps

    def fail(self, failure: Failure) -> dict[str, Any]:
        error = {"error_class": failure.error_class, "message": failure.message, "status": failure.status}
        if failure.retry_after_s is not None:
            error["retry_after"] = failure.retry_after_s
        # Not retried, as on the real providers: the row is about the error, not about waiting it out.
        return {"provider_options": {"mock": {"steps": [{"error": error}]}}, "max_retries": 0}

    def options(self) -> tuple[dict[str, Any], Callable[[Any, list[dict[str, Any]]], None]]:
        def check(response: Any, sent: list[dict[str, Any]]) -> None:
            assert response.model == "echo-custom"

        return {"mock": {"model": "echo-custom"}}, check


ANTHROPIC_KEY = "fake-anthropic-key-never-to-be-seen-0123456789"


class AnthropicHarness(Harness):
    name = "anthropic"
    model = "anthropic:claude-sonnet-4-5"
    reasoning_exact = False  # Anthropic reports no thinking-token count: the worker estimates it
    key = ANTHROPIC_KEY

    async def start(self, nursery: trio.Nursery, start_daemon: Callable[..., Awaitable[Any]]) -> Harness:
        self.upstream = await FakeUpstream().start(nursery)
        self.daemon = await start_daemon(
            {"providers": {"anthropic": {"base_url": self.upstream.base_url}}}, env={"ANTHROPIC_API_KEY": ANTHROPIC_KEY}
        )
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

    def call_id(self, turn: int, index: int) -> str:
        return f"toolu_{turn}_{index}"

    def conversation(self, body: dict[str, Any]) -> list[Any]:
        return list(body["messages"])

    def max_tokens(self, body: dict[str, Any]) -> int:
        return int(body["max_tokens"])

    def images(self, body: dict[str, Any]) -> list[Any]:
        return [b["source"] for b in body["messages"][0]["content"] if b["type"] == "image"]

    def _blocks_of(self, body: dict[str, Any], kind: str) -> list[dict[str, Any]]:
        return [
            b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"] if b.get("type") == kind
        ]

    def tool_calls(self, body: dict[str, Any]) -> list[str]:
        return [b["id"] for b in self._blocks_of(body, "tool_use")]

    def tool_results(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        def text(content: Any) -> str:
            return content if isinstance(content, str) else "".join(b["text"] for b in content if b["type"] == "text")

        return [(b["tool_use_id"], text(b["content"])) for b in self._blocks_of(body, "tool_result")]

    def last_turn(self, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "messages": body["messages"][-1:]}

    def output_schema(self, body: dict[str, Any]) -> dict[str, Any] | None:
        fmt = body.get("output_config", {}).get("format")
        return fmt["schema"] if fmt and fmt["type"] == "json_schema" else None

    def check_cache(self, first: dict[str, Any], second: dict[str, Any]) -> None:
        # Anthropic caches only what is marked: the worker marks the system prompt.
        for body in (first, second):
            assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
        assert second["system"] == first["system"]

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
        return {
            "input_tokens": turn.input_tokens - turn.cache_read_tokens - turn.cache_write_tokens,
            "cache_read_input_tokens": turn.cache_read_tokens,
            "cache_creation_input_tokens": turn.cache_write_tokens,
            "output_tokens": turn.output_tokens,
        }

    def _reply(self, turn: Turn, n: int) -> Callable[[Recorded], Reply]:
        stop = "tool_use" if turn.calls else "end_turn"
        blocks = self._blocks(turn, n)

        def reply(request: Recorded) -> Reply:
            if not request.json().get("stream"):
                return Reply.json(
                    {
                        "id": f"msg_{n}",
                        "type": "message",
                        "role": "assistant",
                        "model": "claude-sonnet-4-5",
                        "content": blocks,
                        "stop_reason": stop,
                        "stop_sequence": None,
                        "usage": self._usage(turn),
                    }
                )
            return Reply.sse(self._sse(blocks, stop, turn, n), chunk_size=64)

        return reply

    def _sse(self, blocks: list[dict[str, Any]], stop: str, turn: Turn, n: int) -> str:
        def event(kind: str, data: dict[str, Any]) -> str:
            return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

        start_usage = {**self._usage(turn), "output_tokens": 1}
        out = [
            event(
                "message_start",
                {
                    "message": {
                        "id": f"msg_{n}",
                        "type": "message",
                        "role": "assistant",
                        "model": "claude-sonnet-4-5",
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": start_usage,
                    }
                },
            )
        ]
        for index, block in enumerate(blocks):
            kind = block["type"]
            if kind == "text":
                out.append(
                    event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
                )
                text = block["text"]
                for piece in (text[i : i + 5] for i in range(0, len(text), 5)):
                    out.append(
                        event("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": piece}})
                    )
            elif kind == "thinking":
                out.append(
                    event(
                        "content_block_start",
                        {"index": index, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
                    )
                )
                out.append(
                    event(
                        "content_block_delta",
                        {"index": index, "delta": {"type": "thinking_delta", "thinking": block["thinking"]}},
                    )
                )
                out.append(
                    event(
                        "content_block_delta",
                        {"index": index, "delta": {"type": "signature_delta", "signature": block["signature"]}},
                    )
                )
            else:
                out.append(
                    event(
                        "content_block_start",
                        {
                            "index": index,
                            "content_block": {
                                "type": "tool_use",
                                "id": block["id"],
                                "name": block["name"],
                                "input": {},
                            },
                        },
                    )
                )
                raw = json.dumps(block["input"])
                for piece in (raw[i : i + 7] for i in range(0, len(raw), 7)):
                    out.append(
                        event(
                            "content_block_delta",
                            {"index": index, "delta": {"type": "input_json_delta", "partial_json": piece}},
                        )
                    )
            out.append(event("content_block_stop", {"index": index}))
        out.append(
            event(
                "message_delta",
                {"delta": {"stop_reason": stop, "stop_sequence": None}, "usage": {"output_tokens": turn.output_tokens}},
            )
        )
        out.append(event("message_stop", {}))
        return "".join(out)


OPENAI_KEY = "sk-fake-openai-key-never-to-be-seen-0123456789"
RESPONSES = "/v1/responses"


class OpenAIHarness(Harness):
    """The Responses API: every turn streamed as OpenAI sends it (the worker streams whole
    responses too), built by `fakes.openai_responses`."""

    name = "openai"
    model = "openai:gpt-5"
    key = OPENAI_KEY

    async def start(self, nursery: trio.Nursery, start_daemon: Callable[..., Awaitable[Any]]) -> Harness:
        self.upstream = await FakeUpstream().start(nursery)
        self.daemon = await start_daemon(
            env={
                "OPENAI_API_KEY": OPENAI_KEY,
                "OPENAI_BASE_URL": self.upstream.base_url + "/v1",
                "OPENAI_ORG_ID": "",
                "OPENAI_PROJECT_ID": "",
            }
        )
        return self

    def script(self, *turns: Turn) -> dict[str, Any]:
        self.upstream.route("POST", RESPONSES, *[self._reply(t, n) for n, t in enumerate(turns)])
        return {}

    def fail(self, failure: Failure) -> dict[str, Any]:
        codes = {
            "authentication": ("invalid_request_error", "invalid_api_key"),
            "rate_limit": ("requests", "rate_limit_exceeded"),
        }
        kind, code = codes[failure.error_class]
        headers = {"retry-after": f"{failure.retry_after_s:g}"} if failure.retry_after_s is not None else {}
        body = {"error": {"message": failure.message, "type": kind, "param": None, "code": code}}
        self.upstream.route("POST", RESPONSES, Reply.json(body, status=failure.status, headers=headers))
        return {"max_retries": 0}

    def sent(self) -> list[dict[str, Any]]:
        return [r.json() for r in self.upstream.sent(RESPONSES)]

    def options(self) -> tuple[dict[str, Any], Callable[[Any, list[dict[str, Any]]], None]]:
        def check(response: Any, sent: list[dict[str, Any]]) -> None:
            assert sent[-1]["prompt_cache_key"] == "tenant-42" and sent[-1]["service_tier"] == "flex"

        return {"openai": {"prompt_cache_key": "tenant-42", "service_tier": "flex"}}, check

    def call_id(self, turn: int, index: int) -> str:
        return f"call_{turn}_{index}"

    def conversation(self, body: dict[str, Any]) -> list[Any]:
        return list(body["input"])

    def max_tokens(self, body: dict[str, Any]) -> int:
        return int(body["max_output_tokens"])

    def images(self, body: dict[str, Any]) -> list[Any]:
        return [c for c in body["input"][0]["content"] if c["type"] == "input_image"]

    def tool_calls(self, body: dict[str, Any]) -> list[str]:
        return [i["call_id"] for i in body["input"] if i["type"] == "function_call"]

    def tool_results(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        return [(i["call_id"], i["output"]) for i in body["input"] if i["type"] == "function_call_output"]

    def last_turn(self, body: dict[str, Any]) -> dict[str, Any]:
        items = body["input"]
        start = len(items)
        while start and items[start - 1]["type"] == "function_call_output":
            start -= 1
        return {**body, "input": items[start:]}

    def output_schema(self, body: dict[str, Any]) -> dict[str, Any] | None:
        fmt = body.get("text", {}).get("format")
        return fmt["schema"] if fmt and fmt["type"] == "json_schema" else None

    def check_cache(self, first: dict[str, Any], second: dict[str, Any]) -> None:
        # OpenAI caches a repeated prefix by itself: the second turn must begin with the first, unchanged.
        assert second["instructions"] == first["instructions"]
        assert second["input"][: len(first["input"])] == first["input"]

    def _items(self, turn: Turn, n: int) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        if turn.reasoning:
            items.append(oa.reasoning(f"rs_{n}", [turn.reasoning], encrypted=f"gAAAAB-enc-{n}"))
        if turn.text:
            items.append(oa.message(f"msg_{n}", turn.text))
        items += [
            oa.function_call(f"fc_{n}_{i}", self.call_id(n, i), name, args) for i, (name, args) in enumerate(turn.calls)
        ]
        return items

    @staticmethod
    def _usage(turn: Turn) -> dict[str, Any]:
        # OpenAI's figures are the canonical ones: cached tokens within input, reasoning within output.
        return {
            "input_tokens": turn.input_tokens,
            "output_tokens": turn.output_tokens,
            "total_tokens": turn.input_tokens + turn.output_tokens,
            "input_tokens_details": {
                "cached_tokens": turn.cache_read_tokens,
                "cache_write_tokens": turn.cache_write_tokens,
            },
            "output_tokens_details": {"reasoning_tokens": turn.reasoning_tokens},
        }

    def _reply(self, turn: Turn, n: int) -> Callable[[Recorded], Reply]:
        payloads = oa.events(self._items(turn, n), usage=self._usage(turn), response_id=f"resp_{n}")

        def reply(request: Recorded) -> Reply:
            if not request.json().get("stream"):
                return Reply.json(payloads[-1]["response"])
            return Reply.sse(oa.sse(payloads), chunk_size=97)

        return reply


GEMINI_KEY = "gk-test-fake-gemini-key-never-to-be-seen-0123"
GEMINI_STREAM = "/v1beta/models/gemini-3.8-flash:streamGenerateContent"


class GeminiHarness(Harness):
    """`streamGenerateContent?alt=sse` (the worker streams whole responses too), built by
    `fakes.gemini_stream`; a Gemini 3 turn signs its first function call."""

    name = "gemini"
    model = "gemini:gemini-3.8-flash"
    key = GEMINI_KEY
    reports_cache_writes = False  # implicit caching: Gemini reports reads only

    async def start(self, nursery: trio.Nursery, start_daemon: Callable[..., Awaitable[Any]]) -> Harness:
        self.upstream = await FakeUpstream().start(nursery)
        self.daemon = await start_daemon(
            {"providers": {"gemini": {"base_url": self.upstream.base_url}}},
            env={"GEMINI_API_KEY": GEMINI_KEY, "GOOGLE_API_KEY": ""},
        )
        return self

    def script(self, *turns: Turn) -> dict[str, Any]:
        self.upstream.route("POST", GEMINI_STREAM, *[self._reply(t, n) for n, t in enumerate(turns)])
        return {}

    def fail(self, failure: Failure) -> dict[str, Any]:
        statuses = {"authentication": "UNAUTHENTICATED", "rate_limit": "RESOURCE_EXHAUSTED"}
        details = (
            [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{failure.retry_after_s:g}s"}]
            if failure.retry_after_s is not None
            else []
        )
        self.upstream.route(
            "POST", GEMINI_STREAM, gs.error(failure.status, statuses[failure.error_class], failure.message, details)
        )
        return {"max_retries": 0}

    def sent(self) -> list[dict[str, Any]]:
        return [r.json() for r in self.upstream.sent(GEMINI_STREAM)]

    def options(self) -> tuple[dict[str, Any], Callable[[Any, list[dict[str, Any]]], None]]:
        safety = [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_ONLY_HIGH"}]

        def check(response: Any, sent: list[dict[str, Any]]) -> None:
            assert sent[-1]["safetySettings"] == safety and sent[-1]["cachedContent"] == "cachedContents/abc123"
            assert sent[-1]["generationConfig"]["topK"] == 5

        return {
            "gemini": {
                "safety_settings": safety,
                "cached_content": "cachedContents/abc123",
                "generation_config": {"topK": 5},
            }
        }, check

    def call_id(self, turn: int, index: int) -> str:
        return f"call-{turn}-{index}"

    def conversation(self, body: dict[str, Any]) -> list[Any]:
        return list(body["contents"])

    def max_tokens(self, body: dict[str, Any]) -> int:
        return int(body["generationConfig"]["maxOutputTokens"])

    def images(self, body: dict[str, Any]) -> list[Any]:
        return [p for p in body["contents"][0]["parts"] if "inlineData" in p or "fileData" in p]

    def _parts(self, body: dict[str, Any], kind: str) -> list[dict[str, Any]]:
        return [p[kind] for c in body["contents"] for p in c["parts"] if kind in p]

    def tool_calls(self, body: dict[str, Any]) -> list[str]:
        return [c["id"] for c in self._parts(body, "functionCall")]

    def tool_results(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        return [(r["id"], r["response"]["result"]) for r in self._parts(body, "functionResponse")]

    def last_turn(self, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "contents": body["contents"][-1:]}

    def output_schema(self, body: dict[str, Any]) -> dict[str, Any] | None:
        config = body.get("generationConfig", {})
        return config.get("responseJsonSchema") if config.get("responseMimeType") == "application/json" else None

    def check_cache(self, first: dict[str, Any], second: dict[str, Any]) -> None:
        # Gemini caches a repeated prefix implicitly: the second turn must begin with the first, unchanged.
        assert second["systemInstruction"] == first["systemInstruction"]
        assert second["contents"][: len(first["contents"])] == first["contents"]

    def _reply(self, turn: Turn, n: int) -> Callable[[Recorded], Reply]:
        parts: list[dict[str, Any]] = []  # one chunk each
        if turn.reasoning:
            parts.append({"text": turn.reasoning, "thought": True})
        parts += [{"text": turn.text[i : i + 5]} for i in range(0, len(turn.text), 5)]
        for i, (name, args) in enumerate(turn.calls):
            part: dict[str, Any] = {"functionCall": {"name": name, "args": args, "id": self.call_id(n, i)}}
            if i == 0:
                part["thoughtSignature"] = f"U0lHLWNhbGwt{n}"
            parts.append(part)
        # Gemini's figures: the prompt counts cached tokens, thoughts are apart from candidates.
        usage = {
            "promptTokenCount": turn.input_tokens,
            "cachedContentTokenCount": turn.cache_read_tokens,
            "candidatesTokenCount": turn.output_tokens - turn.reasoning_tokens,
            "thoughtsTokenCount": turn.reasoning_tokens,
            "totalTokenCount": turn.input_tokens + turn.output_tokens,
        }
        chunks = [gs.chunk(p) for p in parts[:-1]]
        chunks.append(gs.chunk(*parts[-1:], finish="STOP", usage=usage))  # the last part ends the turn

        def reply(request: Recorded) -> Reply:
            if "alt=sse" not in request.path:  # without it, Gemini streams one JSON array
                return Reply(200, {"content-type": "application/json"}, [json.dumps(chunks).encode()])
            return Reply.sse(gs.sse(*chunks), chunk_size=61)

        return reply


COMPAT_KEY = "sk-or-fake-compat-key-never-to-be-seen-0123456789"
CHAT = "/api/v1/chat/completions"


class OpenAICompatHarness(Harness):
    """An OpenAI-compatible host (an OpenRouter-like one, whose usage says the tokens it
    wrote to the cache) over Chat Completions, streamed as `fakes.chat_completions` builds
    it; a model the user priced in their `models:`."""

    name = "openai_compat"
    model = "router:vendor/chat-model"
    key = COMPAT_KEY

    async def start(self, nursery: trio.Nursery, start_daemon: Callable[..., Awaitable[Any]]) -> Harness:
        self.upstream = await FakeUpstream().start(nursery)
        self.daemon = await start_daemon(
            {
                "providers": {
                    "router": {
                        "type": "openai_compat",
                        "base_url": self.upstream.base_url + "/api/v1",
                        "api_key_env": "ROUTER_KEY",
                    }
                },
                "models": {
                    "router:vendor/chat-model": {
                        "wire_name": "vendor/chat-model",
                        "reasoning": True,
                        "vision": True,
                        "structured_output": True,
                        "price": {"input": 1.0, "output": 4.0, "cache_read": 0.1, "cache_write": 1.25},
                    }
                },
            },
            env={"ROUTER_KEY": COMPAT_KEY},
        )
        return self

    def script(self, *turns: Turn) -> dict[str, Any]:
        self.upstream.route("POST", CHAT, *[self._reply(t, n) for n, t in enumerate(turns)])
        return {}

    def fail(self, failure: Failure) -> dict[str, Any]:
        kinds = {
            "authentication": ("invalid_request_error", "invalid_api_key"),
            "rate_limit": ("requests", "rate_limit_exceeded"),
        }
        kind, code = kinds[failure.error_class]
        headers = {"retry-after": f"{failure.retry_after_s:g}"} if failure.retry_after_s is not None else {}
        self.upstream.route("POST", CHAT, cc.error(failure.status, failure.message, kind, code, **headers))
        return {"max_retries": 0}

    def sent(self) -> list[dict[str, Any]]:
        return [r.json() for r in self.upstream.sent(CHAT)]

    def options(self) -> tuple[dict[str, Any], Callable[[Any, list[dict[str, Any]]], None]]:
        def check(response: Any, sent: list[dict[str, Any]]) -> None:
            assert sent[-1]["top_k"] == 5 and sent[-1]["provider"] == {"order": ["vendor-a"]}
            assert sent[-1]["transforms"] == ["middle-out"]

        options = {"top_k": 5, "provider": {"order": ["vendor-a"]}, "extra_body": {"transforms": ["middle-out"]}}
        return {"router": options}, check

    def call_id(self, turn: int, index: int) -> str:
        return f"call_{turn}_{index}"

    def conversation(self, body: dict[str, Any]) -> list[Any]:
        return [m for m in body["messages"] if m["role"] != "system"]

    def max_tokens(self, body: dict[str, Any]) -> int:
        return int(body["max_completion_tokens"])

    def images(self, body: dict[str, Any]) -> list[Any]:
        user = next(m for m in body["messages"] if m["role"] == "user")
        return [c for c in user["content"] if c["type"] == "image_url"]

    def tool_calls(self, body: dict[str, Any]) -> list[str]:
        return [c["id"] for m in body["messages"] if m["role"] == "assistant" for c in m.get("tool_calls", [])]

    def tool_results(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        return [(m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"]

    def last_turn(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body["messages"]
        start = len(messages)
        while start and messages[start - 1]["role"] == "tool":
            start -= 1
        return {**body, "messages": messages[start:]}

    def output_schema(self, body: dict[str, Any]) -> dict[str, Any] | None:
        fmt = body.get("response_format")
        return fmt["json_schema"]["schema"] if fmt and fmt["type"] == "json_schema" else None

    def check_cache(self, first: dict[str, Any], second: dict[str, Any]) -> None:
        # The host caches a repeated prefix: the second turn must begin with the first, unchanged.
        assert second["messages"][: len(first["messages"])] == first["messages"]

    @staticmethod
    def _usage(turn: Turn) -> dict[str, Any]:
        # OpenAI's figures, which OpenRouter follows: cached and written tokens within the
        # prompt, reasoning within the completion.
        return {
            "prompt_tokens": turn.input_tokens,
            "completion_tokens": turn.output_tokens,
            "total_tokens": turn.input_tokens + turn.output_tokens,
            "prompt_tokens_details": {
                "cached_tokens": turn.cache_read_tokens,
                "cache_write_tokens": turn.cache_write_tokens,
                "audio_tokens": 0,
            },
            "completion_tokens_details": {"reasoning_tokens": turn.reasoning_tokens},
        }

    def _reply(self, turn: Turn, n: int) -> Callable[[Recorded], Reply]:
        payloads = cc.chunks(
            id=f"gen-{n}",
            model="vendor/chat-model",
            text=turn.text,
            reasoning=turn.reasoning,
            calls=[(self.call_id(n, i), name, args) for i, (name, args) in enumerate(turn.calls)],
            usage=self._usage(turn),
        )

        def reply(request: Recorded) -> Reply:
            if not request.json().get("stream"):
                return Reply.json(cc.completion(payloads))
            return Reply.sse(cc.sse(payloads), chunk_size=89)

        return reply


class OllamaHarness(Harness):
    """Ollama's native `/api/chat`, NDJSON as `fakes.ollama_chat` builds it. Its tool calls
    have no ids (a result names its tool), it reports no reasoning-token count and no
    cache writes (its prompt cache is implicit), and a local model has no price."""

    name = "ollama"
    model = "ollama:qwen3:8b"
    reasoning_exact = False
    reports_cache_writes = False
    priced = False

    async def start(self, nursery: trio.Nursery, start_daemon: Callable[..., Awaitable[Any]]) -> Harness:
        self.upstream = await FakeUpstream().start(nursery)
        self.daemon = await start_daemon(
            {"providers": {"ollama": {"enabled": True, "base_url": self.upstream.base_url}}}
        )
        return self

    def script(self, *turns: Turn) -> dict[str, Any]:
        self.upstream.route("POST", "/api/chat", *[self._reply(t) for t in turns])
        return {}

    def fail(self, failure: Failure) -> dict[str, Any]:
        headers = {"retry-after": f"{failure.retry_after_s:g}"} if failure.retry_after_s is not None else {}
        self.upstream.route("POST", "/api/chat", ol.error(failure.status, failure.message, **headers))
        return {"max_retries": 0}

    def sent(self) -> list[dict[str, Any]]:
        return [r.json() for r in self.upstream.sent("/api/chat")]

    def options(self) -> tuple[dict[str, Any], Callable[[Any, list[dict[str, Any]]], None]]:
        def check(response: Any, sent: list[dict[str, Any]]) -> None:
            assert sent[-1]["keep_alive"] == "30m" and sent[-1]["options"]["num_ctx"] == 8192

        return {"ollama": {"keep_alive": "30m", "options": {"num_ctx": 8192}}}, check

    def call_id(self, turn: int, index: int) -> str:
        return "get_weather"  # Ollama pairs a result with its call by the tool's name

    def conversation(self, body: dict[str, Any]) -> list[Any]:
        return [m for m in body["messages"] if m["role"] != "system"]

    def max_tokens(self, body: dict[str, Any]) -> int:
        return int(body["options"]["num_predict"])

    def images(self, body: dict[str, Any]) -> list[Any]:
        user = next(m for m in body["messages"] if m["role"] == "user")
        return list(user.get("images", []))

    def tool_calls(self, body: dict[str, Any]) -> list[str]:
        return [
            c["function"]["name"] for m in body["messages"] if m["role"] == "assistant" for c in m.get("tool_calls", [])
        ]

    def tool_results(self, body: dict[str, Any]) -> list[tuple[str, str]]:
        return [(m["tool_name"], m["content"]) for m in body["messages"] if m["role"] == "tool"]

    def last_turn(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body["messages"]
        start = len(messages)
        while start and messages[start - 1]["role"] == "tool":
            start -= 1
        return {**body, "messages": messages[start:]}

    def output_schema(self, body: dict[str, Any]) -> dict[str, Any] | None:
        fmt = body.get("format")
        return fmt if isinstance(fmt, dict) else None

    def check_cache(self, first: dict[str, Any], second: dict[str, Any]) -> None:
        # Ollama reuses the KV cache of a repeated prefix: the second turn must begin with the first.
        assert second["messages"][: len(first["messages"])] == first["messages"]

    def _reply(self, turn: Turn) -> Callable[[Recorded], Reply]:
        # Ollama's counts: the prompt's tokens with those it found cached, the output's with the thinking.
        payloads = ol.lines(
            model="qwen3:8b",
            text=turn.text,
            thinking=turn.reasoning,
            calls=turn.calls,
            prompt_eval_count=turn.input_tokens,
            prompt_eval_cached_count=turn.cache_read_tokens,
            eval_count=turn.output_tokens,
        )

        def reply(request: Recorded) -> Reply:
            if request.json().get("stream") is False:
                return Reply.json(ol.whole(payloads))
            return Reply.ndjson(payloads)

        return reply


#: The providers the matrix runs on.
HARNESSES: dict[str, type[Harness]] = {
    "mock": MockHarness,
    "anthropic": AnthropicHarness,
    "openai": OpenAIHarness,
    "gemini": GeminiHarness,
    "openai_compat": OpenAICompatHarness,
    "ollama": OllamaHarness,
}


class SharedHarnesses:
    """One started harness per provider, shared by the tests of a module.

    Starting a daemon costs more than most rows take, so each provider's daemon and
    fake upstream start once, on first use, and live in a trio loop of their own on a
    background thread (pytest-trio gives every test its own loop, which cannot hold
    them across tests). Only plain data crosses threads: routes set and requests
    read while that provider's test waits for its reply.
    """

    def __init__(self) -> None:
        self.started: dict[str, Harness] = {}
        self._ready = threading.Event()
        self._thread = threading.Thread(target=trio.run, args=(self._serve,), name="matrix-harnesses", daemon=True)
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._daemons: list[DaemonProcess] = []
        self._done: trio.Event | None = None

    def __enter__(self) -> SharedHarnesses:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the harnesses' loop did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None and self._done is not None
        trio.from_thread.run_sync(self._done.set, trio_token=self._token)
        self._thread.join(60)
        assert not self._thread.is_alive(), "the harnesses' daemons did not stop"

    def get(self, name: str) -> Harness:
        if name not in self.started:
            self.started[name] = trio.from_thread.run(self._start, name, trio_token=self._token)
        harness = self.started[name]
        harness.forget()
        return harness

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._done = trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._ready.set()
                await self._done.wait()
                for daemon in self._daemons:
                    await daemon.stop()
                nursery.cancel_scope.cancel()
        finally:
            for daemon in self._daemons:
                daemon.cleanup()

    async def _start(self, name: str) -> Harness:
        assert self._nursery is not None
        nursery = self._nursery

        async def start_daemon(
            config: dict[str, Any] | None = None, env: dict[str, str] | None = None
        ) -> DaemonProcess:
            daemon = DaemonProcess(config, env)
            self._daemons.append(daemon)
            await daemon.start(nursery)
            if daemon.exited.is_set():
                raise RuntimeError(f"daemon exited at start:\n{daemon.output()}")
            return daemon

        with trio.fail_after(30):
            return await HARNESSES[name]().start(nursery, start_daemon)
