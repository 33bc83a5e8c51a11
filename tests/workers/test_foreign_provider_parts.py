"""A conversation moved off Anthropic: its opaque parts are left out, with a warning, never a failure."""

from __future__ import annotations

import pytest

from trunkline.protocol.messages import Message, ModelInfo, ProviderPart, Request, TextPart
from trunkline.workers.mock.request import history_warnings
from trunkline.workers.ollama.request import build as ollama_build
from trunkline.workers.openai_compat.request import build as chat_build

SEARCH = ProviderPart(
    api="anthropic",
    kind="server_tool_use",
    provider="anthropic",
    data={"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"q": "x"}},
)
COMPACTION = ProviderPart(
    api="anthropic",
    kind="compaction",
    provider="anthropic",
    data={"type": "compaction", "content": "Earlier: the user said hello."},
)


def history(*assistant) -> list[Message]:
    return [Message.user("look it up"), Message(role="assistant", content=list(assistant)), Message.user("so?")]


def chat(messages):
    model = ModelInfo(id="vllm:qwen3", provider="vllm", wire_name="Qwen/Qwen3-8B")
    return chat_build(
        Request(model=model.id, messages=messages), model, provider="vllm", wire_ids={}, stream=True, instance={}
    )


def ollama(messages):
    model = ModelInfo(id="ollama:qwen3:8b", provider="ollama", wire_name="qwen3:8b")
    return ollama_build(Request(model=model.id, messages=messages), model, provider="ollama", stream=True)


@pytest.mark.parametrize("build", [chat, ollama], ids=["openai_compat", "ollama"])
def test_parts_are_left_out_with_one_warning_each(build):
    built = build(history(TextPart(text="Searching."), SEARCH, COMPACTION))
    assistant = [m for m in built.body["messages"] if m["role"] == "assistant"]
    assert [m["content"] for m in assistant] == ["Searching."]
    assert [w.code for w in built.warnings] == ["provider_part_dropped", "provider_part_dropped"]
    assert "anthropic content (server_tool_use)" in built.warnings[0].message
    assert "anthropic content (compaction)" in built.warnings[1].message


@pytest.mark.parametrize("build", [chat, ollama], ids=["openai_compat", "ollama"])
def test_an_assistant_turn_left_empty_is_not_sent(build):
    built = build(history(SEARCH))
    assert [m["role"] for m in built.body["messages"]] == ["user", "user"]
    assert [w.code for w in built.warnings] == ["provider_part_dropped"]


def test_the_mock_warns_as_the_real_translators_do():
    request = Request(model="mock:echo", messages=history(TextPart(text="ok"), SEARCH))
    warnings = history_warnings(request, "echo")
    assert [w.code for w in warnings] == ["provider_part_dropped"] and "mock" in warnings[0].message
    assert history_warnings(Request(model="mock:echo", messages=[Message.user("x")]), "echo") == []
