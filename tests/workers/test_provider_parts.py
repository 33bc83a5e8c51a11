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
    for ev in [
        StreamStart(model="m"),
        TextStart(index=0),
        TextDelta(index=0, text="a"),
        TextEnd(index=0, text="a"),
        ProviderPartEvent(index=1, api="anthropic", kind="server_tool_use", data={"id": "s1"}),
        TextStart(index=2),
        TextDelta(index=2, text="b"),
    ]:
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


def test_every_other_translator_says_when_it_leaves_out_a_gemini_signature():
    from trunkline.protocol.messages import Message, ModelInfo, Request, ToolCallPart
    from trunkline.workers.anthropic.request import build as anthropic
    from trunkline.workers.ollama.request import build as ollama
    from trunkline.workers.openai_compat.request import build as openai_compat

    signature = ProviderPart(
        api="gemini", kind="thoughtSignature", data="c2ln", model="gemini-3.8-flash", provider="gemini"
    )
    request = Request(
        model="x:y",
        messages=[
            Message.user("go"),
            Message.assistant(ToolCallPart(id="tu_1", name="f", provider="gemini"), signature),
            Message.tool_result("tu_1", "done"),
        ],
    )
    model = ModelInfo(id="x:y", provider="x", wire_name="y")
    builds = [
        anthropic(request, model, provider="anthropic", wire_ids={}, stream=True),
        openai_compat(request, model, provider="vllm", wire_ids={}, stream=True, instance={}),
        ollama(request, model, provider="ollama", stream=True),
    ]
    for built in builds:
        assert "c2ln" not in str(built.body)
        assert [w.code for w in built.warnings if w.code != "tools_from_history"] == ["provider_part_dropped"]
