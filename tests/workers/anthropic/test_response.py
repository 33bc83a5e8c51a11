"""Anthropic wire JSON -> canonical: whole responses, stop reasons, usage, errors."""

from __future__ import annotations

import json

import httpx
import pytest

from trunkline.protocol.messages import ProviderPart, RedactedThinkingPart, TextPart, ThinkingPart, ToolCallPart
from trunkline.workers.anthropic import errors
from trunkline.workers.anthropic.response import finish_reason, parse, usage
from trunkline.workers.errors import ProviderError

MESSAGE = {
    "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [
        {"type": "thinking", "thinking": "The user wants weather.", "signature": "EqQBCkgIARABGAIiQL"},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
        {"type": "text", "text": "Let me check.", "citations": None},
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}},
        {
            "type": "tool_use",
            "id": "toolu_01A09q90qw90lq917835lq9",
            "name": "get_weather",
            "input": {"location": "San Francisco, CA", "unit": "celsius"},
        },
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 2095,
        "output_tokens": 503,
        "cache_creation_input_tokens": 100,
        "cache_read_input_tokens": 1000,
        "service_tier": "standard",
    },
}


def test_parse_a_whole_message():
    response = parse(MESSAGE, include_raw=True)
    assert response.id == "msg_01XFDUDYJgAACzvnptvVoYEL" and response.model == "claude-sonnet-4-5-20250929"
    assert response.message.content == [
        ThinkingPart(text="The user wants weather.", signature="EqQBCkgIARABGAIiQL"),
        RedactedThinkingPart(data="EmwKAhgBEgy3va3pzix"),
        TextPart(text="Let me check."),
        ProviderPart(api="anthropic", kind="server_tool_use", data=MESSAGE["content"][3]),
        ToolCallPart(
            id="",
            name="get_weather",
            arguments={"location": "San Francisco, CA", "unit": "celsius"},
            provider_id="toolu_01A09q90qw90lq917835lq9",
        ),
    ]
    assert response.finish_reason.reason == "tool_calls" and response.finish_reason.raw == "tool_use"
    u = response.usage
    # cached tokens are part of the canonical input: 2095 + 1000 + 100
    assert (u.input_tokens, u.output_tokens, u.total_tokens) == (3195, 503, 3698)
    assert (u.cache_read_tokens, u.cache_write_tokens) == (1000, 100)
    assert u.reasoning_tokens > 0 and u.estimated  # not reported: estimated from the thinking text
    assert response.raw == MESSAGE


def test_raw_only_when_asked():
    assert parse(MESSAGE).raw is None


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        ("pause_turn", "other"),
        ("model_context_window_exceeded", "length"),
        ("brand_new_reason", "other"),
        (None, "other"),
    ],
)
def test_stop_reasons(raw, reason):
    mapped = finish_reason(raw, "END" if raw == "stop_sequence" else None)
    assert mapped.reason == reason and mapped.raw == raw
    assert mapped.stop_sequence == ("END" if raw == "stop_sequence" else None)


def test_reported_thinking_tokens_are_used():
    u = usage({"input_tokens": 10, "output_tokens": 90, "output_tokens_details": {"thinking_tokens": 64}}, "x y z")
    assert u.reasoning_tokens == 64 and not u.estimated


def test_malformed_bodies_are_invalid_responses():
    for bad in ({"type": "message"}, [], "text"):
        with pytest.raises(ProviderError) as info:
            parse(bad)
        assert info.value.error_class == "invalid_response"


def test_a_tool_use_whose_input_is_not_an_object_stays_a_call_with_the_raw_input():
    body = {
        "id": "m",
        "type": "message",
        "model": "claude-sonnet-4-5",
        "stop_reason": "tool_use",
        "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "f", "input": [1]},
            {"type": "tool_use", "id": "toolu_2", "name": "g", "input": '{"a": 1'},
        ],
        "usage": {"input_tokens": 3, "output_tokens": 4},
    }
    first, second = parse(body).tool_calls
    assert (first.arguments, first.raw_arguments) == (None, "[1]")
    assert (second.arguments, second.raw_arguments) == (None, '{"a": 1')


def error_body(kind: str, message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_1"}).encode()


@pytest.mark.parametrize(
    ("status", "kind", "message", "error_class", "retryable"),
    [
        (401, "authentication_error", "invalid x-api-key", "authentication", False),
        (403, "permission_error", "no access", "access_denied", False),
        (404, "not_found_error", "model: claude-sonet-4-5", "not_found", False),
        (413, "request_too_large", "Request exceeds the maximum allowed number of bytes.", "context_length", False),
        (400, "invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum", "context_length", False),
        (400, "invalid_request_error", "messages.0.content: field required", "invalid_request", False),
        (429, "rate_limit_error", "Number of request tokens has exceeded your rate limit", "rate_limit", True),
        (529, "overloaded_error", "Overloaded", "rate_limit", True),
        (500, "api_error", "Internal server error", "server_error", True),
        (504, "timeout_error", "Request timed out while processing", "server_error", True),
        (402, "billing_error", "credit balance too low", "quota_exceeded", False),
    ],
)
def test_error_classification(status, kind, message, error_class, retryable):
    err = errors.classify(status, httpx.Headers({"retry-after": "7"}), error_body(kind, message))
    assert (err.error_class, err.retryable, err.status, err.code) == (error_class, retryable, status, kind)
    assert message in err.message and err.retry_after == 7.0


def test_a_timeout_error_event_mid_stream_is_a_retryable_server_error():
    err = errors.from_error_object("timeout_error", "Request timed out")
    assert (err.error_class, err.retryable, err.code) == ("server_error", True, "timeout_error")


def test_error_without_a_json_body():
    err = errors.classify(502, httpx.Headers(), b"<html>Bad Gateway</html>")
    assert err.error_class == "server_error" and "Bad Gateway" in err.message and err.retryable


def test_the_recorded_404_classifies_as_not_found():
    from pathlib import Path

    case = (
        Path(__file__).resolve().parents[3].parent
        / "shared/recordings/anthropic/pydantic+pydantic-ai"
        / "tests__cassettes__test_model_name_suggestions__test_model_name_suggestion_anthropic_"
    )
    if not case.exists():
        pytest.skip("../shared/recordings is not present")
    meta = json.loads((case / "meta.json").read_text())
    err = errors.classify(meta["status"], httpx.Headers(meta["headers"]), (case / "response.body").read_bytes())
    assert err.error_class == "not_found" and err.code == "not_found_error"
