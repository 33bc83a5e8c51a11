"""Responses API bodies -> canonical Response, and error bodies -> classified errors:
golden wire JSON and every shared recording that is not a stream."""

from __future__ import annotations

import json

import pytest

from helpers import REPO
from trunkline.protocol.messages import ModelInfo, ProviderPart, TextPart, ThinkingPart, ToolCallPart
from trunkline.workers.errors import ProviderError
from trunkline.workers.openai import errors
from trunkline.workers.openai.response import parse

RECORDINGS = REPO.parent / "shared" / "recordings" / "openai-responses"
MODEL = ModelInfo(id="openai:gpt-5", provider="openai", wire_name="gpt-5", reasoning=True)


def recording(name: str) -> tuple[dict, bytes]:
    if not RECORDINGS.exists():
        pytest.skip("../shared/recordings is not present; cassettes/ covers the same forms")
    folder = next(p for p in RECORDINGS.glob("*/*") if p.name.endswith(name))
    return json.loads((folder / "meta.json").read_text()), (folder / "response.body").read_bytes()


def test_a_whole_response_in_canonical_form():
    body = {
        "id": "resp_9",
        "object": "response",
        "model": "gpt-5-2025-08-07",
        "status": "completed",
        "output": [
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "Plan."}, {"type": "summary_text", "text": "Check."}],
                "encrypted_content": "gAAAA==",
            },
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "phase": "final_answer",
                "content": [{"type": "output_text", "text": "Calling.", "annotations": []}],
            },
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "f",
                "arguments": '{"x": 1}',
                "status": "completed",
            },
            {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": ["q"]},
        ],
        "usage": {
            "input_tokens": 100,
            "output_tokens": 50,
            "total_tokens": 150,
            "input_tokens_details": {"cached_tokens": 60, "cache_write_tokens": 30},
            "output_tokens_details": {"reasoning_tokens": 20},
        },
    }
    response = parse(body, MODEL, include_raw=True)
    content = response.message.content
    assert content[:2] == [ThinkingPart(text="Plan."), ThinkingPart(text="Check.")]
    assert content[2] == ProviderPart(api="openai", kind="reasoning", data=body["output"][0])
    assert content[3] == ProviderPart(
        api="openai", kind="message", data={"type": "message", "id": "msg_1", "phase": "final_answer"}
    )
    assert content[4] == TextPart(text="Calling.")
    assert content[5] == ToolCallPart(
        id="", name="f", arguments={"x": 1}, raw_arguments='{"x": 1}', provider_id="call_1"
    )
    assert content[6] == ProviderPart(api="openai", kind="file_search_call", data=body["output"][3])
    assert response.finish_reason.reason == "tool_calls" and response.finish_reason.raw == "completed"
    u = response.usage
    assert (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens, u.reasoning_tokens) == (
        100,
        50,
        60,
        30,
        20,
    )
    assert response.id == "resp_9" and response.model == "gpt-5-2025-08-07" and response.raw is body


def test_refusal_incomplete_and_failed():
    refusal = {
        "id": "r",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "refusal", "refusal": "I can't help with that."}],
            }
        ],
    }
    refused = parse(refusal, MODEL)
    assert refused.finish_reason.reason == "content_filter" and refused.text == "I can't help with that."
    cut = parse(
        {"id": "r", "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": []}, MODEL
    )
    assert cut.finish_reason.reason == "length" and cut.finish_reason.raw == "max_output_tokens"
    with pytest.raises(ProviderError) as info:
        parse(
            {
                "id": "r",
                "status": "failed",
                "output": [],
                "error": {"code": "rate_limit_exceeded", "message": "slow down"},
            },
            MODEL,
        )
    assert info.value.error_class == "rate_limit" and "slow down" in info.value.message
    with pytest.raises(ProviderError, match="not a Responses API response"):
        parse({"choices": []}, MODEL)
    broken = parse(
        {
            "id": "r",
            "status": "completed",
            "output": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{oops"}],
        },
        MODEL,
    )
    (call,) = broken.tool_calls
    assert call.arguments is None and call.raw_arguments == "{oops" and call.provider_id == "c"


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("thinking_with_modified_history.0", ["thinking", "reasoning", "text"]),
        ("thinking_with_modified_history.2", ["thinking", "reasoning", "text"]),
        ("model_web_search_tool_stream.1", ["reasoning", "web_search_call", "reasoning", "text"]),
        (
            "mcp_server_tool_with_connector",
            ["mcp_list_tools", "reasoning", "mcp_call", "reasoning", "mcp_call", "reasoning", "text"],
        ),
        ("openai-reasoning-encrypted-content.1", ["thinking", "reasoning", "text"]),
    ],
)
def test_recorded_responses(name, parts):
    _, body = recording(name)
    response = parse(json.loads(body), MODEL)
    kinds = [
        "text" if isinstance(p, TextPart) else "thinking" if isinstance(p, ThinkingPart) else p.kind
        for p in response.message.content
    ]
    assert kinds == parts
    assert response.finish_reason.reason == "stop" and response.tool_calls == []
    assert response.usage.input_tokens > 0 and response.usage.reasoning_tokens > 0
    # an MCP call that failed upstream is still the provider's own item, kept as it came
    if name == "mcp_server_tool_with_connector":
        calls = [p.data for p in response.message.content if getattr(p, "kind", "") == "mcp_call"]
        assert all("error" in c for c in calls)


@pytest.mark.parametrize(
    ("name", "status", "error_class", "code"),
    [
        ("model_name_suggestion_openai-responses_", None, "not_found", "model_not_found"),
        ("openai_responses_model_http_error", None, "invalid_request", "decimal_below_min_value"),
        ("thinking_with_modified_history.1", None, "invalid_request", "invalid_request_error"),
        ("openai-error.1", 429, "quota_exceeded", "insufficient_quota"),
        ("reasoning-model-temperature-error", 400, "invalid_request", "invalid_request_error"),
    ],
)
def test_recorded_errors(name, status, error_class, code):
    meta, body = recording(name)
    err = errors.classify(status or meta["status"], {}, body)
    assert (err.error_class, err.code) == (error_class, code)
    assert err.status == (status or meta["status"])


def test_error_classification_by_status_type_and_code():
    def classify(status, error, headers=None):
        return errors.classify(status, headers or {}, json.dumps({"error": error}).encode())

    limited = classify(
        429, {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}, {"retry-after": "7"}
    )
    assert limited.error_class == "rate_limit" and limited.retry_after == 7.0 and limited.retryable
    assert (
        classify(
            400, {"message": "too long", "type": "invalid_request_error", "code": "context_length_exceeded"}
        ).error_class
        == "context_length"
    )
    assert (
        classify(
            401, {"message": "Incorrect API key", "type": "invalid_request_error", "code": "invalid_api_key"}
        ).error_class
        == "authentication"
    )
    assert classify(500, {"message": "oops", "type": "server_error", "code": None}).error_class == "server_error"
    assert (
        classify(403, {"message": "no", "type": "invalid_request_error", "code": None}).error_class == "access_denied"
    )
    garbage = errors.classify(502, {}, b"<html>Bad gateway</html>")
    assert garbage.error_class == "server_error" and "Bad gateway" in garbage.message
    stream_error = errors.from_error_object({"type": "error", "code": "insufficient_quota", "message": "quota"})
    assert stream_error.error_class == "quota_exceeded" and not stream_error.retryable
    unknown = errors.from_error_object({"type": "error", "code": None, "message": "something"})
    assert unknown.error_class == "server_error" and unknown.retryable
