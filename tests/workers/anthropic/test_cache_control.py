"""The caller's own cache breakpoints (`cache_control` on parts and tools) in the
Anthropic request body: where the caller put them, and then no automatic ones."""

from __future__ import annotations

import json

from trunkline.protocol.messages import (
    CacheControl,
    DocumentPart,
    ImagePart,
    Message,
    ModelInfo,
    Request,
    TextPart,
    Tool,
    ToolCallPart,
    ToolResultPart,
)
from trunkline.workers.anthropic.request import build

MODEL = ModelInfo(id="anthropic:claude-sonnet-4-5", provider="anthropic", wire_name="claude-sonnet-4-5")
EPHEMERAL = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}
PNG = "iVBORw0KGgo="


def body(request: Request) -> dict:
    return build(request, MODEL, provider="anthropic", stream=False).body


def test_breakpoints_go_where_the_caller_put_them_and_no_others():
    request = Request(
        model=MODEL.id,
        messages=[
            Message(
                role="system",
                content=[TextPart(text="Rules.", cache_control=CacheControl(ttl="1h")), TextPart(text="More rules.")],
            ),
            Message.user(
                TextPart(text="Read this.", cache_control=CacheControl()),
                ImagePart(data=PNG, media_type="image/png", cache_control=CacheControl()),
                DocumentPart(url="https://example.com/a.pdf", cache_control=CacheControl(ttl="1h")),
            ),
            Message.assistant(
                ToolCallPart(id="toolu_1", name="weather", arguments={"city": "Paris"}, cache_control=CacheControl())
            ),
            Message(
                role="tool",
                content=[
                    ToolResultPart(
                        tool_call_id="toolu_1",
                        content=[TextPart(text="18C", cache_control=CacheControl())],
                        cache_control=CacheControl(),
                    )
                ],
            ),
        ],
        tools=[Tool(name="weather", cache_control=CacheControl(ttl="1h")), Tool(name="time")],
    )
    out = body(request)
    assert out["system"] == [
        {"type": "text", "text": "Rules.", "cache_control": HOUR},
        {"type": "text", "text": "More rules."},
    ]
    assert out["messages"][0]["content"] == [
        {"type": "text", "text": "Read this.", "cache_control": EPHEMERAL},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": PNG},
            "cache_control": EPHEMERAL,
        },
        {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}, "cache_control": HOUR},
    ]
    assert out["messages"][1]["content"][0]["cache_control"] == EPHEMERAL
    (result,) = out["messages"][2]["content"]
    assert result["cache_control"] == EPHEMERAL
    assert result["content"] == [{"type": "text", "text": "18C", "cache_control": EPHEMERAL}]
    assert out["tools"][0]["cache_control"] == HOUR and "cache_control" not in out["tools"][1]
    assert json.dumps(out).count("cache_control") == 8


def test_one_breakpoint_of_the_callers_turns_the_automatic_ones_off():
    marked = Request(
        model=MODEL.id,
        messages=[Message.system("Rules."), Message.user(TextPart(text="Hi", cache_control=CacheControl()))],
        tools=[Tool(name="weather")],
    )
    out = body(marked)
    assert out["system"] == "Rules."  # one joined prompt, unmarked, as without automatic caching
    assert "cache_control" not in out["tools"][0]
    assert json.dumps(out).count("cache_control") == 1
    # Without any, the automatic breakpoints are as before.
    plain = body(
        Request(model=MODEL.id, messages=[Message.system("Rules."), Message.user("Hi")], tools=[Tool(name="weather")])
    )
    assert plain["system"] == [{"type": "text", "text": "Rules.", "cache_control": EPHEMERAL}]
    assert plain["tools"][0]["cache_control"] == EPHEMERAL
