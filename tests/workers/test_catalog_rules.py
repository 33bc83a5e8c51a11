"""Every catalog model, one representative request each, checked against that model's rules.

The request asks for everything a model may refuse (temperature, top_p, a reasoning
effort, a tool); the supervisor's checks and the model's translator then decide. Anthropic
models go through the Anthropic translator; OpenAI and Gemini models through Chat
Completions (what an openai_compat instance pointed at either provider sends).
"""

from __future__ import annotations

import msgspec
import pytest

from trunkline.config.catalog import Catalog
from trunkline.protocol.messages import Message, ModelInfo, ModelRules, Request, Tool
from trunkline.supervisor.validate import Invalid, validate
from trunkline.workers import _rules
from trunkline.workers.anthropic.request import build as build_anthropic
from trunkline.workers.errors import ProviderError
from trunkline.workers.openai_compat.request import build as build_chat

CATALOG = Catalog.load(providers={"anthropic", "openai", "gemini"})
MODELS = [m for m in CATALOG.models() if m.provider != "mock"]
TOOL = Tool(name="get-weather", parameters={"type": "object", "properties": {"city": {"type": "string"}}})


def representative(model: ModelInfo, effort: str) -> Request:
    return Request(
        model=model.id,
        messages=[Message.user("What is the weather in Oslo?")],
        tools=[TOOL],
        temperature=0.5,
        top_p=0.9,
        reasoning_effort=effort,  # type: ignore[arg-type]
        provider_options={"anthropic": {"auto_cache": False}},
    )


def test_every_provider_model_carries_rules_with_a_source_for_each():
    defaults = msgspec.structs.asdict(ModelRules())
    assert len(MODELS) == 49
    for m in MODELS:
        rules = msgspec.structs.asdict(m.rules)
        set_rules = {k for k, v in rules.items() if k != "sources" and v != defaults[k]}
        assert set_rules, m.id
        assert set_rules <= set(m.rules.sources), (m.id, set_rules - set(m.rules.sources))
        assert all(url.startswith("https://") for url in m.rules.sources.values()), m.id
        if m.rules.efforts is not None and m.rules.default_effort is not None:
            assert m.rules.default_effort in m.rules.efforts, m.id


@pytest.mark.parametrize("effort", ["high", "none", "minimal", "max"])
@pytest.mark.parametrize("model", MODELS, ids=[m.id for m in MODELS])
def test_the_built_body_keeps_the_models_rules(model: ModelInfo, effort: str):
    request = representative(model, effort)
    rules = model.rules
    if rules.efforts is not None and effort not in rules.efforts:
        with pytest.raises(Invalid, match=r"rule `efforts`"):
            validate(request, model, stream=True)
        return
    validate(request, model, stream=True)
    if model.provider == "anthropic":
        body = build_anthropic(request, model, provider="anthropic", wire_ids={}, stream=True).body
    else:
        cc_tools = rules.chat_completions_tools
        if cc_tools == "no" or (cc_tools == "no_reasoning" and effort != "none"):
            with pytest.raises(ProviderError, match=r"rule `chat_completions_tools`"):
                build_chat(request, model, provider=model.provider, wire_ids={}, stream=True, instance={})
            return
        body = build_chat(request, model, provider=model.provider, wire_ids={}, stream=True, instance={}).body
    assert body["model"] == model.wire_name

    sent = [p for p in _rules.SAMPLING_ORDER if p in body]
    if rules.sampling is not None:
        assert set(sent) <= set(rules.sampling), (model.id, sent)
    if rules.sampling_exclusive:
        assert len(sent) <= 1
    if rules.sampling_needs_no_reasoning and effort != "none":
        assert sent == []

    if model.provider == "anthropic":
        thinking = body.get("thinking")
        if thinking and thinking.get("type") == "enabled" and thinking["budget_tokens"] >= rules.default_max_tokens:
            # A budget over the default raises max_tokens to make room for the answer.
            assert body["max_tokens"] == thinking["budget_tokens"] + 4096 <= model.max_output
        else:
            assert body["max_tokens"] == rules.default_max_tokens
        if effort == "none":
            assert thinking in (None, {"type": "disabled"})
            assert (thinking is not None) == rules.thinking_default_on
            if rules.sampling:  # thinking off: a model that takes sampling gets temperature
                assert body.get("temperature") == 0.5
        elif model.thinking == "adaptive":
            assert thinking == {"type": "adaptive"} and body["output_config"]["effort"] == effort
            assert effort in (rules.efforts or [effort])
        else:
            assert thinking["type"] == "enabled" and 1024 <= thinking["budget_tokens"] < body["max_tokens"]
        assert "budget_tokens" not in str(body) or model.thinking == "budget"
        assert body["tools"][0]["name"] == "get-weather"
    else:
        assert body["reasoning_effort"] == effort if model.reasoning else "reasoning_effort" not in body
        assert body["tools"][0]["function"]["name"] == "get-weather"
