"""Arguments streamed by JSON path: assembled into the object, and written out as JSON text on the way."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from trunkline.workers.gemini.partial_args import PartialArgs, parse_path

keys = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=6)
leaves = st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=12)
values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, min_size=1, max_size=3) | st.dictionaries(keys, inner, min_size=1, max_size=3),
    max_leaves=10,
)
objects = st.dictionaries(keys, values, min_size=1, max_size=4)


def path_text(path: tuple[Any, ...]) -> str:
    out = "$"
    for token in path:
        out += f"[{token}]" if isinstance(token, int) else f"['{token}']" if not token.isidentifier() else f".{token}"
    return out


def fragments(value: Any, path: tuple[Any, ...], data: Any) -> list[dict[str, Any]]:
    """The partialArgs Gemini would send for `value`, in document order, strings cut anywhere."""
    if isinstance(value, dict):
        return [f for k, v in value.items() for f in fragments(v, (*path, k), data)]
    if isinstance(value, list):
        return [f for i, v in enumerate(value) for f in fragments(v, (*path, i), data)]
    where = path_text(path)
    if isinstance(value, str):
        cuts = sorted(data.draw(st.lists(st.integers(0, len(value)), max_size=3)))
        pieces = [value[a:b] for a, b in zip([0, *cuts], [*cuts, len(value)], strict=True)]
        out = [{"jsonPath": where, "stringValue": p, "willContinue": True} for p in pieces]
        out.append({"jsonPath": where, "stringValue": ""})  # Gemini's empty closer
        return out
    if value is None:
        return [{"jsonPath": where, "nullValue": "NULL_VALUE"}]
    if isinstance(value, bool):
        return [{"jsonPath": where, "boolValue": value}]
    return [{"jsonPath": where, "numberValue": value}]


def representable(value: Any) -> bool:
    """Keys with a quote or bracket cannot be written in Gemini's path syntax; empty containers never stream."""
    if isinstance(value, dict):
        return bool(value) and all("'" not in k and "\\" not in k and representable(v) for k, v in value.items())
    if isinstance(value, list):
        return bool(value) and all(representable(v) for v in value)
    return True


@settings(max_examples=200, deadline=None)
@given(objects, st.data())
def test_the_text_deltas_are_the_json_of_the_assembled_object(obj, data):
    if not representable(obj):
        return
    args = PartialArgs()
    text = "".join(args.feed(f) for f in fragments(obj, (), data)) + args.finish()
    assert args.value == obj
    assert json.loads(text) == obj


def test_paths():
    assert parse_path("$.recipe.ingredients[0].amount") == ("recipe", "ingredients", 0, "amount")
    assert parse_path("$['a b'][2]") == ("a b", 2)
    assert parse_path("location") is None and parse_path("$") is None and parse_path("$.a[x]") is None
    args = PartialArgs()
    assert args.feed({"jsonPath": "$[0]", "numberValue": 1}) == "" and args.finish() == "" and args.value == {}


def test_out_of_order_paths_still_give_valid_json_and_the_object_wins():
    args = PartialArgs()
    text = (
        "".join(
            args.feed(f)
            for f in [
                {"jsonPath": "$.a.x", "numberValue": 1},
                {"jsonPath": "$.b", "stringValue": "s"},
                {"jsonPath": "$.a.y", "numberValue": 2},
            ]
        )
        + args.finish()
    )
    assert args.value == {"a": {"x": 1, "y": 2}, "b": "s"}
    json.loads(text)  # a repeated key, but well-formed
