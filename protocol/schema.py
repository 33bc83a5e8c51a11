"""Generate `schema.json`, the JSON Schema of the client protocol.

`python -m trunkline.protocol.schema` rewrites the file; a test fails when the
committed file differs from what the messages produce.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from .messages import PROTOCOL_VERSION, AnyEvent, ControlReply, ControlRequest

SCHEMA_PATH = Path(__file__).resolve().with_name("schema.json")


def generate() -> dict[str, Any]:
    (request, reply, event), components = msgspec.json.schema_components(
        [ControlRequest, ControlReply, AnyEvent], ref_template="#/$defs/{name}"
    )
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


def render() -> str:
    return json.dumps(generate(), indent=2, sort_keys=True) + "\n"


def main() -> None:
    SCHEMA_PATH.write_text(render())
    print(f"wrote {SCHEMA_PATH}")


if __name__ == "__main__":
    main()
