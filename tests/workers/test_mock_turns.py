"""The mock's scripted conversations: the turn played follows the history's assistant turns."""

from __future__ import annotations

import msgspec
import pytest

from trunkline.protocol.messages import Message, ModelInfo, Request
from trunkline.workers.errors import ProviderError
from trunkline.workers.mock import playback, wire
from trunkline.workers.mock.request import build

ECHO = ModelInfo(id="mock:echo", provider="mock", wire_name="echo")

TURNS = {
    "mock": {
        "turns": [
            [{"tool_call": {"name": "f", "arguments": {}}}, {"finish": "tool_calls"}],
            [{"text": "second"}],
            [{"text": "third"}],
        ]
    }
}


def played(history: list[Message], options: dict = TURNS) -> list[dict]:
    """The chunks the mock plays for the request, as its stream carries them."""
    request = Request(model="mock:echo", messages=history, provider_options=options)
    messages = [item for item in playback.play(build(request, ECHO).body) if isinstance(item, bytes)]
    chunks = [msgspec.to_builtins(wire.decoder.decode(message)) for message in messages]
    return [c for c in chunks if c["kind"] in ("text", "tool_start", "finish")]


def test_the_turn_is_chosen_by_the_assistant_turns_already_held():
    assert [c["kind"] for c in played([Message.user("q")])] == ["tool_start", "finish"]
    one_round = [Message.user("q"), Message.assistant("calling"), Message.tool_result("tu_1", "r")]
    assert played(one_round) == [{"kind": "text", "text": "second"}]
    assert played([*one_round, Message.assistant("x"), Message.user("y")]) == [{"kind": "text", "text": "third"}]


def test_a_history_past_the_script_and_steps_with_turns_are_refused():
    history = [Message.user("q"), *[Message.assistant("a"), Message.user("q")] * 3]
    with pytest.raises(ProviderError, match="scripts 3 turn\\(s\\) and the history already holds 3"):
        played(history)
    with pytest.raises(ProviderError, match=r"`turns` \(one reply per assistant turn\), not both"):
        played([Message.user("q")], {"mock": {"turns": [[]], "steps": []}})
