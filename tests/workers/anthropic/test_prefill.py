"""A prefill on the wire: the conversation's last assistant message goes last, as
given, for the answer to continue (the supervisor has checked Anthropic's rules)."""

from __future__ import annotations

from trunkline.protocol.messages import Message, ModelInfo, Request
from trunkline.workers.anthropic.request import build

SONNET = ModelInfo(id="anthropic:claude-sonnet-4-5", provider="anthropic", wire_name="claude-sonnet-4-5")


def test_a_prefill_goes_last_as_the_assistant_turn_the_answer_continues():
    built = build(
        Request(
            model=SONNET.id,
            messages=[
                Message.system("Answer in JSON."),
                Message.user("Name a colour"),
                Message.assistant('{"colour":'),
            ],
        ),
        SONNET,
        provider="anthropic",
        stream=True,
    )
    messages = built.body["messages"]
    assert messages[-1] == {"role": "assistant", "content": [{"type": "text", "text": '{"colour":'}]}
    # The automatic cache breakpoint marks the user's turn, never the text being continued.
    assert messages[0]["role"] == "user" and "cache_control" in messages[0]["content"][-1]
    assert "thinking" not in built.body and built.warnings == []
