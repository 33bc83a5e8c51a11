"""Schemas for generate_object in their three forms, and how an answer is judged."""

from __future__ import annotations

import msgspec
import pytest

from trunkline.errors import InvalidResponseError, NoObjectGeneratedError
from trunkline.structured import object_schema

PERSON = {
    "type": "object",
    "title": "Person",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
}


class Address(msgspec.Struct):
    city: str


class Person(msgspec.Struct):
    name: str
    age: int
    address: Address | None = None


def test_a_json_schema_dict_is_sent_as_given_and_gives_dicts():
    spec = object_schema(PERSON)
    fmt = spec.response_format()
    assert (fmt.kind, fmt.name, fmt.schema, fmt.strict) == ("json_schema", "Person", PERSON, True)
    assert spec.parse('{"name": "Alice", "age": 30}', None) == {"name": "Alice", "age": 30}


def test_a_struct_gives_its_schema_with_the_object_at_the_root_and_converts():
    spec = object_schema(Person)
    assert spec.json_schema["type"] == "object" and spec.json_schema["required"] == ["name", "age"]
    assert "Address" in spec.json_schema["$defs"]
    assert spec.parse('{"name": "Al", "age": 3, "address": {"city": "Oslo"}}', None) == Person(
        name="Al", age=3, address=Address(city="Oslo")
    )


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("Sure! Here it is: {", "the answer is not JSON"),
        ('{"name": "Alice"}', "'age' is a required property"),
        ('{"name": "Alice", "age": -1}', "age: -1 is less than the minimum of 0"),
    ],
)
def test_an_answer_that_is_not_json_or_does_not_fit_is_no_object(text, reason):
    with pytest.raises(NoObjectGeneratedError) as caught:
        object_schema(PERSON).parse(text, None)
    assert isinstance(caught.value, InvalidResponseError) and caught.value.text == text
    assert reason in caught.value.validation_error and reason in str(caught.value)


def test_a_pydantic_model_when_pydantic_is_installed():
    pydantic = pytest.importorskip("pydantic")

    class City(pydantic.BaseModel):
        name: str
        population: int

    spec = object_schema(City)
    assert spec.json_schema["required"] == ["name", "population"]
    assert spec.parse('{"name": "Oslo", "population": 700000}', None) == City(name="Oslo", population=700000)


def test_anything_else_is_refused_by_name():
    with pytest.raises(TypeError, match="JSON Schema dict, a msgspec Struct type or a pydantic model"):
        object_schema(int)
