"""Validation of histories that hold opaque provider parts."""

from __future__ import annotations

import pytest

from trunkline.protocol.messages import Message, ModelInfo, ProviderPart, Request, TextPart
from trunkline.supervisor.validate import Invalid, validate

MODEL = ModelInfo(
    id="anthropic:claude-sonnet-4-5", provider="anthropic", wire_name="claude-sonnet-4-5", context_window=1000
)
SEARCH = ProviderPart(
    api="anthropic",
    kind="server_tool_use",
    data={"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
)


def req(*messages: Message) -> Request:
    return Request(model=MODEL.id, messages=list(messages))


def test_an_assistant_turn_of_provider_parts_alone_is_content():
    validate(
        req(Message.user("find it"), Message(role="assistant", content=[SEARCH]), Message.user("and?")),
        MODEL,
        stream=True,
    )


def test_a_paused_turn_may_end_the_conversation_to_be_continued():
    validate(
        req(Message.user("find it"), Message(role="assistant", content=[TextPart(text="Searching."), SEARCH])),
        MODEL,
        stream=True,
    )


def test_a_plain_assistant_turn_still_may_not_end_it():
    with pytest.raises(Invalid, match="last message"):
        validate(req(Message.user("x"), Message.assistant("y")), MODEL, stream=True)


def test_a_provider_part_from_the_user_is_refused():
    with pytest.raises(Invalid, match=r"messages\[0\].content\[1\]: a user message cannot hold provider_part"):
        validate(req(Message(role="user", content=[TextPart(text="x"), SEARCH])), MODEL, stream=True)


def test_a_large_provider_part_counts_against_the_context_window():
    big = ProviderPart(
        api="anthropic",
        kind="web_search_tool_result",
        data={"type": "web_search_tool_result", "content": [{"encrypted_content": "A" * 8000}]},
    )
    with pytest.raises(Invalid) as info:
        validate(
            req(Message.user("x"), Message(role="assistant", content=[big]), Message.user("y")), MODEL, stream=True
        )
    assert info.value.error_class == "context_length"


def test_turns_before_a_compaction_do_not_count_against_the_context():
    compaction = ProviderPart(
        api="anthropic",
        kind="compaction",
        data={"type": "compaction", "content": "The user pasted a long text; say hello."},
    )
    long = Message.user("The quick brown fox jumps over the lazy dog. " * 300)
    compacted = req(
        long, Message(role="assistant", content=[compaction, TextPart(text="Hello!")]), Message.user("Again?")
    )
    validate(compacted, MODEL, stream=True)
    with pytest.raises(Invalid) as info:  # the same history without the compaction is too long
        validate(req(long, Message.assistant("Hello!"), Message.user("Again?")), MODEL, stream=True)
    assert info.value.error_class == "context_length"
