"""What a model's capabilities and a prefill's rules refuse before any call, checked on
the validator itself (tests/e2e/test_capabilities.py and test_prefill.py go through
the daemon)."""

from __future__ import annotations

import msgspec
import pytest

from trunkline.config.catalog import Catalog
from trunkline.protocol.messages import (
    AudioPart,
    ImagePart,
    Message,
    ModelInfo,
    ModelRules,
    Request,
    ResponseFormat,
    ToolCallPart,
    ToolResultPart,
)
from trunkline.supervisor.validate import Invalid, validate

CATALOG = Catalog.load(providers={"anthropic", "openai", "mock"})
SONNET_45 = CATALOG.resolve("anthropic:claude-sonnet-4-5")
BASIC = CATALOG.resolve("mock:basic")
PNG = ImagePart(data="iVBORw0KGgoAAAA=", media_type="image/png")
WAV = AudioPart(data="UklGRiQAAAA=", media_type="audio/wav")
ASK = Message.user("Name a colour")
PREFILL = Message.assistant('{"colour":')


def check(model: ModelInfo, *messages: Message, **fields) -> None:
    validate(Request(model=model.id, messages=list(messages), **fields), model, stream=True)


def refusal(model: ModelInfo, *messages: Message, **fields) -> Invalid:
    with pytest.raises(Invalid) as caught:
        check(model, *messages, **fields)
    return caught.value


def test_an_image_in_a_tool_result_is_refused_for_a_model_without_vision():
    call = Message(role="assistant", content=[ToolCallPart(id="c1", name="look", arguments={})])
    result = Message(role="tool", content=[ToolResultPart(tool_call_id="c1", content=[PNG])])
    error = refusal(BASIC, ASK, call, result)
    assert error.capability == "vision"
    assert error.message.startswith("messages[2].content[0].content[0]: model mock:basic does not accept images")


def test_audio_is_refused_where_the_implementation_carries_none_and_taken_where_it_does():
    assert refusal(SONNET_45, Message.user("hear", WAV)).capability == "audio"
    check(CATALOG.resolve("mock:echo"), Message.user("hear", WAV))


def test_a_prefill_is_taken_without_thinking_and_refused_with_it():
    check(SONNET_45, ASK, PREFILL)
    check(SONNET_45, ASK, PREFILL, reasoning_effort="none")
    check(SONNET_45, ASK, PREFILL, provider_options={"anthropic": {"thinking": {"type": "disabled"}}})
    check(SONNET_45, ASK, PREFILL, response_format=ResponseFormat(kind="json_object"))
    assert "thinks" in refusal(SONNET_45, ASK, PREFILL, reasoning_effort="low").message
    # A model that thinks unless told not to: a prefill needs effort `none`.
    thinker = msgspec.structs.replace(SONNET_45, rules=ModelRules(thinking_default_on=True))
    assert "thinks" in refusal(thinker, ASK, PREFILL).message
    check(thinker, ASK, PREFILL, reasoning_effort="none")
    always = msgspec.structs.replace(SONNET_45, rules=ModelRules(thinking_always_on=True))
    assert "thinks" in refusal(always, ASK, PREFILL, reasoning_effort="none").message


def test_a_prefill_of_several_text_parts_is_judged_on_its_whole_text():
    check(SONNET_45, ASK, Message.assistant("The colour ", "is"))
    assert "whitespace" in refusal(SONNET_45, ASK, Message.assistant("The colour", "\n")).message


def test_a_refused_prefill_names_the_capability_for_the_log():
    error = refusal(BASIC, ASK, PREFILL)
    assert error.capability == "prefill" and "taken only by anthropic models" in error.message
