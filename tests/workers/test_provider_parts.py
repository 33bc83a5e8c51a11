"""The opaque provider part: carried in order through a stream, sent back only where it belongs."""

from __future__ import annotations

from trunkline.protocol.accumulate import StreamAccumulator
from trunkline.protocol.messages import (
    ProviderPart,
    ProviderPartEvent,
    StreamStart,
    TextDelta,
    TextEnd,
    TextPart,
    TextStart,
    WarningInfo,
)
from trunkline.workers._provider_parts import keep_provider_part


def test_a_provider_part_keeps_its_place_among_the_other_parts():
    acc = StreamAccumulator("anthropic")
    for ev in [StreamStart(model="m"), TextStart(index=0), TextDelta(index=0, text="a"), TextEnd(index=0, text="a"),
               ProviderPartEvent(index=1, api="anthropic", kind="server_tool_use", data={"id": "s1"}),
               TextStart(index=2), TextDelta(index=2, text="b")]:
        acc.feed(ev)
    content = acc.content()
    assert [type(p) for p in content] == [TextPart, ProviderPart, TextPart]
    assert content[1] == ProviderPart(api="anthropic", kind="server_tool_use", data={"id": "s1"}, provider="anthropic")


def test_a_part_goes_back_only_to_its_api_and_model():
    warnings: list[WarningInfo] = []
    free = ProviderPart(api="anthropic", kind="compaction", data={})
    tied = ProviderPart(api="anthropic", kind="thinking", data={}, model="claude-opus-5-5")
    assert keep_provider_part(free, "anthropic", "claude-sonnet-4-5", warnings)
    assert keep_provider_part(tied, "anthropic", "claude-opus-5-5", warnings)
    assert not warnings
    assert not keep_provider_part(tied, "anthropic", "claude-sonnet-4-5", warnings)
    assert not keep_provider_part(free, "openai", "gpt-6-sol", warnings)
    assert [w.code for w in warnings] == ["provider_part_dropped", "provider_part_dropped"]
    assert "claude-opus-5-5" in warnings[0].message and "openai" in warnings[1].message
