"""The local token estimate against what Anthropic reported for recorded requests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import REPO
from trunkline.config.loader import ProviderConfig, RetryPolicy, TimeoutPolicy
from trunkline.protocol.messages import (
    Message,
    ModelInfo,
    Request,
    TextPart,
    ThinkingPart,
    Tool,
    ToolCallPart,
    ToolResultPart,
)
from trunkline.workers.anthropic.adapter import AnthropicAdapter

RECORDINGS = REPO.parent / "shared" / "recordings" / "anthropic"
MODEL = ModelInfo(id="anthropic:claude-sonnet-4-5", provider="anthropic", wire_name="claude-sonnet-4-5", reasoning=True)


def canonical(body: dict) -> Request:
    """A recorded Anthropic request body in canonical form."""
    messages = []
    system = body.get("system")
    if isinstance(system, list):
        system = "\n\n".join(b.get("text", "") for b in system)
    if system:
        messages.append(Message.system(system))
    for m in body["messages"]:
        blocks = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        parts = []
        for b in blocks:
            if b["type"] == "text":
                parts.append(TextPart(text=b["text"]))
            elif b["type"] == "tool_use":
                parts.append(ToolCallPart(id=b["id"], name=b["name"], arguments=b["input"]))
            elif b["type"] == "tool_result":
                content = b.get("content")
                if isinstance(content, list):
                    content = "".join(x.get("text", "") for x in content)
                parts.append(ToolResultPart(tool_call_id=b["tool_use_id"], content=content or ""))
            elif b["type"] == "thinking":
                parts.append(ThinkingPart(text=b["thinking"]))
        messages.append(Message(role=m["role"], content=parts))
    tools = [
        Tool(name=t["name"], description=t.get("description", ""), parameters=t["input_schema"])
        for t in body.get("tools", [])
    ]
    effort = "low" if body.get("thinking", {}).get("type") == "enabled" else None
    return Request(model=MODEL.id, messages=messages, tools=tools, reasoning_effort=effort)


def reported_input(raw: str) -> int | None:
    for line in raw.splitlines():
        if '"message_start"' in line:
            usage = json.loads(line[line.index("{") :])["message"]["usage"]
            break
    else:
        try:
            usage = json.loads(raw)["usage"]
        except (ValueError, KeyError):
            return None
    return (
        usage["input_tokens"]
        + (usage.get("cache_read_input_tokens") or 0)
        + (usage.get("cache_creation_input_tokens") or 0)
    )


def cases() -> list[Path]:
    out = []
    for case in sorted(RECORDINGS.glob("*/*")) if RECORDINGS.exists() else []:
        body = json.loads((case / "request.json").read_text()).get("body")
        if not isinstance(body, dict) or "messages" not in body:
            continue
        # Server tools (web search, MCP) add provider-side prompts and results we cannot see.
        if any("input_schema" not in t for t in body.get("tools", [])) or body.get("mcp_servers"):
            continue
        if reported_input((case / "response.body").read_text()) is not None:
            out.append(case)
    return out


@pytest.mark.skipif(not RECORDINGS.exists(), reason="../shared/recordings/anthropic is not present")
def test_estimate_is_within_about_ten_percent():
    adapter = AnthropicAdapter("anthropic", ProviderConfig(type="anthropic"), RetryPolicy(), TimeoutPolicy())
    checked = 0
    for case in cases():
        body = json.loads((case / "request.json").read_text())["body"]
        actual = reported_input((case / "response.body").read_text())
        estimate = adapter.count_tokens(canonical(body), MODEL)
        if actual >= 300:
            assert abs(estimate - actual) / actual <= 0.10, (case.name, estimate, actual)
        else:  # tiny prompts: a few tokens of framing dominate
            assert abs(estimate - actual) <= 15, (case.name, estimate, actual)
        checked += 1
    assert checked >= 10
