"""Request keywords as a LiteLLM or AI SDK user types them, through the real client and
daemon: a misspelt field is an error naming the nearest valid one, never dropped."""

from __future__ import annotations

import pytest
import trio

from trunkline import Client, generate

pytestmark = pytest.mark.e2e


async def test_misspelt_fields_are_refused_with_the_nearest_valid_one(daemon):
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(TypeError, match="unknown request field `temprature`; did you mean `temperature`"):
                await client.complete("mock:echo", "x", temprature=0.5)
            with pytest.raises(TypeError, match="unknown request field `max_token`; did you mean `max_tokens`"):
                async with client.stream("mock:echo", "x", max_token=3):
                    pass
            with pytest.raises(TypeError, match=r"unknown request field `timeouts\.total_s`; valid: connect_s"):
                await client.complete("mock:echo", "x", timeouts={"total_s": 1})
            with pytest.raises(TypeError, match="did you mean `temperature`"):
                await generate("mock:echo", "x", temprature=0.5, client=client)
            ok = await client.complete("mock:echo", "spelt right", temperature=0.5, timeouts={"request_s": 5})
    assert ok.text == "spelt right"


async def test_openai_style_response_format_is_taken_as_ours(daemon):
    answer = {"mock": {"steps": [{"text": '{"name": "Ada"}'}]}}
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            as_object = await client.complete(
                "mock:echo", "json please", provider_options=answer, response_format={"type": "json_object"}
            )
            as_schema = await client.complete(
                "mock:echo",
                "json please",
                provider_options=answer,
                response_format={
                    "type": "json_schema",
                    "json_schema": {
                        "name": "person",
                        "schema": {"type": "object", "properties": {"name": {"type": "string"}}},
                    },
                },
            )
    assert as_object.text == as_schema.text == '{"name": "Ada"}'


def test_the_openai_spellings_become_the_request_fields():
    from trunkline import build_request

    plain = build_request("mock:echo", "x", response_format={"type": "json_object"}).response_format
    schema = build_request(
        "mock:echo",
        "x",
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": {"type": "object"}, "strict": True},
        },
    ).response_format
    assert plain is not None and plain.kind == "json_object"
    assert schema is not None and (schema.kind, schema.name, schema.schema, schema.strict) == (
        "json_schema",
        "person",
        {"type": "object"},
        True,
    )
    with pytest.raises(TypeError, match=r"unknown request field `response_format\.shema`; did you mean"):
        build_request("mock:echo", "x", response_format={"kind": "json_schema", "shema": {}})
