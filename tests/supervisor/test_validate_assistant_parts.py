"""An assistant turn may carry a provider's opaque parts: they are what its model said."""

from __future__ import annotations

from trunkline.protocol.messages import Message, ModelInfo, ProviderPart, Request, TextPart
from trunkline.supervisor.validate import validate

MODEL = ModelInfo(id="openai:gpt-5", provider="openai", wire_name="gpt-5", reasoning=True)


def test_an_assistant_message_of_provider_parts_alone_is_valid():
    item = ProviderPart(api="openai", kind="reasoning", data={"type": "reasoning", "id": "rs_1", "summary": []})
    request = Request(
        model=MODEL.id,
        messages=[
            Message.user("a"),
            Message(role="assistant", content=[item]),
            Message(role="user", content=[TextPart(text="b")]),
        ],
    )
    validate(request, MODEL, stream=True)
