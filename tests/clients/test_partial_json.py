"""The partial JSON parser behind stream_object: any prefix of a JSON document parses
without a crash, each prefix shows no more than the document holds, and the whole
document parses exactly as json.loads does."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trunkline.partial_json import parse_partial

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=25,
)
documents = st.tuples(json_values, st.booleans(), st.sampled_from([None, 0, 2])).map(
    lambda t: json.dumps(t[0], ensure_ascii=t[1], indent=t[2])
)


def shows_no_more_than(partial: Any, whole: Any) -> bool:
    """Whether `partial` could be what a prefix of `whole` shows."""
    if partial is None:
        return True
    if isinstance(whole, dict):
        return isinstance(partial, dict) and all(
            k in whole and shows_no_more_than(v, whole[k]) for k, v in partial.items()
        )
    if isinstance(whole, list):
        return (
            isinstance(partial, list)
            and len(partial) <= len(whole)
            and all(shows_no_more_than(p, w) for p, w in zip(partial, whole, strict=False))  # a prefix may be shorter
        )
    if isinstance(whole, str):
        return isinstance(partial, str) and whole.startswith(partial)
    return True  # a number may still be growing; a literal is whole or absent


@settings(max_examples=300, deadline=None)
@given(documents)
def test_every_prefix_parses_and_the_whole_equals_json_loads(text: str) -> None:
    whole = json.loads(text)
    assert parse_partial(text) == whole
    for end in range(len(text)):
        assert shows_no_more_than(parse_partial(text[:end]), whole), text[:end]


@settings(max_examples=500, deadline=None)
@given(st.text())
def test_any_text_gives_a_value_or_a_value_error(text: str) -> None:
    with contextlib.suppress(ValueError):
        parse_partial(text)


@pytest.mark.parametrize(
    ("prefix", "shown"),
    [
        ("", None),
        ('{"name": "Al', {"name": "Al"}),
        ('{"name": "Alice", "ag', {"name": "Alice"}),
        ('{"name": "Alice", "age":', {"name": "Alice"}),
        ('{"name": "Alice", "age": 3', {"name": "Alice", "age": 3}),
        ('{"tags": ["a", "b', {"tags": ["a", "b"]}),
        ('{"ok": tr', {}),
        ('{"x": 1.', {}),
        ('"caf\\u00', "caf"),
        ('"tab\\', "tab"),
    ],
)
def test_what_a_prefix_shows(prefix: str, shown: Any) -> None:
    assert parse_partial(prefix) == shown


@pytest.mark.parametrize("bad", ["{1: 2}", "[1 2]", '{"a" 1}', "nope", "[1]x", "01", '"\x01"'])
def test_text_that_cannot_begin_json_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match=r"offset|nested|unexpected|number"):
        parse_partial(bad)
