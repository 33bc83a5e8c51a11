"""Gemini whole responses and error bodies -> canonical Response / ProviderError."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from trunkline.config.loader import ProviderConfig, RetryPolicy, TimeoutPolicy
from trunkline.protocol.accumulate import StreamAccumulator
from trunkline.protocol.messages import (
    Job,
    Message,
    ModelInfo,
    ProviderPart,
    Request,
    Response,
    TextPart,
    ToolCallPart,
)
from trunkline.workers._adapter import Call, Deadlines
from trunkline.workers._contract import Pipeline
from trunkline.workers.errors import ProviderError
from trunkline.workers.gemini import adapter as gemini_adapter
from trunkline.workers.gemini.adapter import GeminiAdapter
from trunkline.workers.gemini.errors import classify, retry_delay
from trunkline.workers.gemini.stream import GeminiStream


def call_for(model: str, include_raw: bool = False) -> Call:
    job = Job(
        request_id="r",
        client_id="c",
        operation_id="o",
        model=ModelInfo(id=f"gemini:{model}", provider="gemini", wire_name=model),
        request=Request(model=f"gemini:{model}", messages=[Message.user("x")], include_raw=include_raw),
    )
    return Call(job, "gemini", 1, "o", Deadlines(connect_s=5, request_s=60, stream_idle_s=30))


def whole(body: Any, model: str = "", include_raw: bool = False) -> Response:
    """A whole generateContent body read as the worker reads one for a whole-response
    request: through the pipeline and the stream translator, its events gathered."""
    gathered = StreamAccumulator()
    pipeline = Pipeline(GeminiStream(model), "sse_or_json", gathered.feed, keep_raw=include_raw)
    pipeline.feed(json.dumps(body).encode())
    result = pipeline.finish(call_for(model or "m", include_raw), "gemini")
    result.message = Message(role="assistant", content=gathered.content())
    return result


def test_a_whole_response_golden():
    body = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"text": "I'll look.", "thoughtSignature": "c2ln"},
                        {"functionCall": {"name": "find", "args": {"q": "café"}}},
                        {"functionCall": {"name": "find", "args": {"q": "bar"}, "id": "x1"}},
                    ],
                },
                "finishReason": "STOP",
                "finishMessage": "Model generated function call(s).",
                "index": 0,
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 40,
            "candidatesTokenCount": 12,
            "thoughtsTokenCount": 30,
            "cachedContentTokenCount": 16,
            "totalTokenCount": 82,
        },
        "modelVersion": "gemini-3.8-flash-001",
        "responseId": "resp-1",
    }
    resp = whole(body, "gemini-3.8-flash", include_raw=True)
    assert resp.message.content == [
        TextPart(text="I'll look."),
        ProviderPart(api="gemini", kind="thoughtSignature", data="c2ln", model="gemini-3.8-flash"),
        ToolCallPart(id="", name="find", arguments={"q": "café"}, raw_arguments='{"q": "café"}'),
        ToolCallPart(id="", name="find", arguments={"q": "bar"}, raw_arguments='{"q": "bar"}', provider_id="x1"),
    ]
    assert (resp.finish_reason.reason, resp.finish_reason.raw) == ("tool_calls", "STOP")
    u = resp.usage
    assert (u.input_tokens, u.output_tokens, u.reasoning_tokens, u.cache_read_tokens, u.total_tokens) == (
        40,
        42,
        30,
        16,
        82,
    )
    assert (resp.id, resp.model, resp.raw) == ("resp-1", "gemini-3.8-flash-001", [json.dumps(body)])


def test_a_body_with_neither_candidates_nor_a_block_is_cut_short():
    with pytest.raises(ProviderError) as err:
        whole({})
    assert err.value.error_class == "network" and "before a finish reason" in err.value.message


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (400, "INVALID_ARGUMENT", "invalid_request"),
        (401, "UNAUTHENTICATED", "authentication"),
        (403, "PERMISSION_DENIED", "access_denied"),
        (404, "NOT_FOUND", "not_found"),
        (429, "RESOURCE_EXHAUSTED", "rate_limit"),
        (500, "INTERNAL", "server_error"),
        (503, "UNAVAILABLE", "server_error"),
        (504, "DEADLINE_EXCEEDED", "server_error"),  # Google's backend gave up: retried, as any 5xx
    ],
)
def test_errors_are_classified_by_status_name(status, code, cls):
    err = classify(status, {}, json.dumps({"error": {"code": status, "message": "m", "status": code}}).encode())
    assert err.error_class == cls and err.status == status and err.code == code and "m" in err.message


def test_a_rate_limit_carries_the_retry_info_delay():
    body = {
        "error": {
            "code": 429,
            "status": "RESOURCE_EXHAUSTED",
            "message": "Quota exceeded",
            "details": [
                {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "34s"},
            ],
        }
    }
    err = classify(429, {}, json.dumps(body).encode())
    assert err.error_class == "rate_limit" and err.retry_after == 34.0 and err.retryable
    assert retry_delay([{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.25s"}]) == 0.25
    assert retry_delay([{"@type": "google.rpc.RetryInfo", "retryDelay": {"seconds": 2, "nanos": 500000000}}]) == 2.5


def test_an_invalid_key_is_authentication_and_a_long_prompt_context_length():
    body = {
        "error": {
            "code": 400,
            "status": "INVALID_ARGUMENT",
            "message": "API key not valid.",
            "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}],
        }
    }
    assert classify(400, {}, json.dumps(body).encode()).error_class == "authentication"
    body = {
        "error": {
            "code": 400,
            "status": "INVALID_ARGUMENT",
            "message": "The input token count (1200000) exceeds the maximum number of tokens allowed",
        }
    }
    assert classify(400, {}, json.dumps(body).encode()).error_class == "context_length"


def test_odd_error_bodies():
    wrapped = json.dumps([{"error": {"code": 404, "status": "NOT_FOUND", "message": "no model"}}]).encode()
    assert classify(404, {}, wrapped).error_class == "not_found"  # the JSON-array stream form
    assert classify(502, {}, b"<html>Bad gateway</html>").error_class == "server_error"
    assert classify(429, {"retry-after": "3"}, b"").retry_after == 3.0


async def test_a_long_generation_in_several_bodies_is_one_response(monkeypatch):
    """The adapter follows each continuation with the same request and the same translator;
    past the most hops it follows, the answer is cut and says so."""

    def body(text, finish, token=None, out=100):
        candidate = {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": finish}
        if token:
            candidate["continuationToken"] = token
        return {"candidates": [candidate], "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": out}}

    async def answer(*bodies: dict) -> tuple[Response, list[dict]]:
        sent: list[dict] = []

        def reply(request: httpx.Request) -> httpx.Response:
            sent.append(json.loads(request.content))
            return httpx.Response(200, json=bodies[len(sent) - 1])

        config = ProviderConfig(type="gemini", base_url="http://gemini.invalid")
        adapter = GeminiAdapter("gemini", config, RetryPolicy(), TimeoutPolicy(), transport=httpx.MockTransport(reply))
        adapter.api_key = "test-key"
        try:
            return await adapter.complete(call_for("gemini-4-argon")), sent
        finally:
            await adapter.aclose()

    resp, sent = await answer(
        body("Chapter 1. ", "CONTINUATION", "tok-1"),
        body("Chapter 2. ", "CONTINUATION", "tok-2"),
        body("The end.", "STOP", out=7),
    )
    assert resp.message.content == [TextPart(text="Chapter 1. Chapter 2. The end.")]
    assert resp.finish_reason.reason == "stop"
    assert (resp.usage.input_tokens, resp.usage.output_tokens) == (30, 207)  # each hop billed, summed
    assert [b.get("continuationToken") for b in sent] == [None, "tok-1", "tok-2"]
    # not followed (the hop limit): the answer is cut, and says so
    monkeypatch.setattr(gemini_adapter, "MAX_HOPS", 1)
    resp, sent = await answer(body("Chapter 1. ", "CONTINUATION", "tok-1"))
    assert resp.finish_reason.reason == "length" and resp.finish_reason.raw == "CONTINUATION"
    assert [w.code for w in resp.warnings] == ["truncated"] and len(sent) == 1
