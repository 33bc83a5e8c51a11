"""Requests real SDKs and agents sent to Anthropic (`../shared/recordings/anthropic`),
replayed at the front door, each provider's answer the recorded one (a fake Anthropic
upstream plays it back): every one is accepted, answered in a form the official SDK's
types validate, and reaches the provider carrying what the client asked for."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from anthropic.lib.streaming._beta_messages import accumulate_event
from anthropic.types.beta import BetaMessage, BetaMessageTokensCount, BetaRawMessageStreamEvent
from anthropic.types.shared import ErrorResponse
from frontdoor.anthropic_door import RECORDINGS, SharedDoor, events_of
from pydantic import TypeAdapter

from fakes.upstream import Reply

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not RECORDINGS.exists(), reason="../shared/recordings is not present"),
]

#: The clients recorded used the Messages API's beta form (`?beta=true`: MCP, compaction
#: and tool search blocks are beta types), so its types judge the answers.
EVENTS: TypeAdapter[Any] = TypeAdapter(BetaRawMessageStreamEvent)
#: The blocks of a history the door keeps opaque: they must reach Anthropic as recorded.
OPAQUE = {"thinking", "redacted_thinking", "server_tool_use", "tool_search_tool_result", "web_search_tool_result"}


def cases() -> list[Path]:
    if not RECORDINGS.exists():
        return []
    found = []
    for request in sorted(RECORDINGS.glob("*/*/request.json")):
        if isinstance(json.loads(request.read_text()).get("body"), dict):
            found.append(request.parent)
    return found


@pytest.fixture(scope="module")
def shared() -> Iterator[SharedDoor]:
    with SharedDoor() as door:
        yield door


def without_cache_marks(value: Any) -> Any:
    """`value` without `cache_control` (the daemon adds its own breakpoints) and empty
    descriptions (which say nothing)."""
    if isinstance(value, dict):
        return {
            k: without_cache_marks(v)
            for k, v in value.items()
            if k != "cache_control" and not (k == "description" and v == "")
        }
    if isinstance(value, list):
        return [without_cache_marks(v) for v in value]
    return value


@pytest.mark.parametrize("case", cases(), ids=lambda p: p.name[-60:])
async def test_a_recorded_request_through_the_door(shared: SharedDoor, case: Path):
    shared.forget()
    assert shared.door is not None
    recorded = json.loads((case / "request.json").read_text())
    meta = json.loads((case / "meta.json").read_text())
    status = meta.get("status") or 200
    answer_body = (case / "response.body").read_bytes()
    kind = "text/event-stream" if meta.get("stream") else "application/json"
    # The recorded answer, in pieces as a network would cut it.
    pieces = [answer_body[i : i + 173] for i in range(0, len(answer_body), 173)]
    shared.anthropic.route("POST", "/v1/messages", Reply(status, {"content-type": kind}, pieces))

    body = {**recorded["body"], "model": "anthropic:" + recorded["body"]["model"]}
    path = httpx.URL(recorded["url"]).path
    headers = {"x-api-key": shared.door.key, "anthropic-version": "2023-06-01"}
    with trio.fail_after(30):
        async with httpx.AsyncClient(base_url=shared.door.url, headers=headers, timeout=20) as http:
            answer = await http.post(path, json=body)

    if path.endswith("/count_tokens"):
        # The daemon counts locally: an answer for any model it would serve.
        assert answer.status_code == 200, answer.text
        assert BetaMessageTokensCount.model_validate(answer.json()).input_tokens > 0
        return
    if status >= 400:
        assert answer.status_code == status, answer.text
        error = ErrorResponse.model_validate(answer.json())
        recorded_error = json.loads(answer_body)["error"]
        assert error.error.type == recorded_error["type"] and recorded_error["message"] in error.error.message
        return
    assert answer.status_code == 200, answer.text
    if body.get("stream"):
        assert answer.headers["content-type"].startswith("text/event-stream")
        snapshot = None
        bufs: dict[int, bytes] = {}
        for name, data in events_of(answer.content):
            if name == "ping":
                continue  # as the SDK's stream skips it
            event = EVENTS.validate_python(data)
            assert event.type == name
            snapshot = accumulate_event(
                event=event, current_snapshot=snapshot, json_bufs=bufs, request_headers=answer.request.headers
            )
        assert snapshot is not None
        message = BetaMessage.model_validate(snapshot.to_dict(mode="json"))
    else:
        message = BetaMessage.model_validate(answer.json())
    assert message.content and message.stop_reason is not None

    (upstream,) = shared.anthropic.sent("/v1/messages")
    sent = upstream.json()
    assert sent["model"] == recorded["body"]["model"]
    for name in ("thinking", "mcp_servers", "context_management", "output_config", "stop_sequences"):
        assert sent.get(name) == recorded["body"].get(name), name
    if "tools" in recorded["body"]:
        assert without_cache_marks(sent["tools"]) == without_cache_marks(recorded["body"]["tools"])
    opaque_sent = [b for m in sent["messages"] for b in m["content"] if b["type"] in OPAQUE]
    opaque_recorded = [
        b
        for m in recorded["body"]["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] in OPAQUE
    ]
    assert opaque_sent == opaque_recorded
