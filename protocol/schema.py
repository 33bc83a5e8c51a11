"""Generate `schema.json`, the JSON Schema of the client protocol.

`python -m trunkline.protocol.schema` rewrites the file; a test fails when the
committed file differs from what the messages produce.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from . import messages as m
from .messages import PROTOCOL_VERSION, AnyEvent, ControlReply, ControlRequest

SCHEMA_PATH = Path(__file__).resolve().with_name("schema.json")


def generate() -> dict[str, Any]:
    (request, reply, event), components = msgspec.json.schema_components(
        [ControlRequest, ControlReply, AnyEvent], ref_template="#/$defs/{name}"
    )
    _add_defaults(components)
    # `ReplayResult.events` is typed as raw bytes in the code (the daemon copies the
    # stored events without decoding them), but on the wire each is a nested event map.
    components["ReplayResult"]["properties"]["events"]["items"] = event
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "trunkline client protocol",
        "description": (
            "Messages are msgpack maps tagged by `type`. Fields equal to their default are "
            "omitted on the wire. Unknown fields must be ignored. See PROTOCOL.md."
        ),
        "x-protocol-version": PROTOCOL_VERSION,
        "x-control-request": request,
        "x-control-reply": reply,
        "x-event": event,
        "$defs": components,
    }


def default_value(field: msgspec.structs.FieldInfo) -> Any:
    """A field's default as plain JSON, nested records written out field by field (a
    type generated from the schema then starts from the same values the daemon does)."""
    value = field.default_factory() if field.default_factory is not msgspec.NODEFAULT else field.default
    return _expand(value)


def _expand(value: Any) -> Any:
    if isinstance(value, msgspec.Struct):
        return {f.encode_name: _expand(getattr(value, f.name)) for f in msgspec.structs.fields(value)}
    return msgspec.to_builtins(value)


def _add_defaults(components: dict[str, Any]) -> None:
    """msgspec writes `default` for plain values only: add it for every optional field
    whose default is a record (or any value it left out)."""
    for name, component in components.items():
        cls = getattr(m, name, None)
        if not (isinstance(cls, type) and issubclass(cls, msgspec.Struct)):
            continue
        properties = component.get("properties", {})
        for field in msgspec.structs.fields(cls):
            if not field.required and field.encode_name in properties:
                properties[field.encode_name]["default"] = default_value(field)


def render() -> str:
    return json.dumps(generate(), indent=2, sort_keys=True) + "\n"


def main() -> None:
    SCHEMA_PATH.write_text(render())
    print(f"wrote {SCHEMA_PATH}")


if __name__ == "__main__":
    main()
