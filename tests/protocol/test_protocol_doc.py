"""PROTOCOL.md's generated parts and schema.json hold what a client in another language needs:
every default (records included), the replay events as nested maps, and wire transcripts that
decode back to the messages they claim to be."""

from __future__ import annotations

import json
import re

import msgspec

from trunkline.protocol import codec, reference, schema, transcripts
from trunkline.protocol import messages as m


def test_transcripts_in_protocol_md_are_current():
    text = transcripts.protocol_md().read_text()
    assert transcripts.splice(text) == text, "PROTOCOL.md's wire transcripts are stale: run `make schema`"


def _dumped_bytes() -> list[bytes]:
    """The bytes of every hex dump in PROTOCOL.md, read back from the text itself."""
    text = transcripts.protocol_md().read_text()
    section = text[text.index(transcripts.BEGIN) : text.index(transcripts.END)]
    out = []
    for block in re.findall(r"```\n(.*?)```", section, re.S):
        out.append(bytes.fromhex("".join(line[10:57] for line in block.splitlines())))
    return out


def test_the_hex_dumps_decode_to_the_messages_they_name():
    hello, welcome, single, array, replay, error = _dumped_bytes()
    assert codec.decode_control_request(hello) == m.Hello(client_name="tl")
    assert codec.decode_control_reply(welcome).client_id == transcripts.CLIENT_ID
    topic, body = codec.split_frame(single)
    assert topic == transcripts.CLIENT_ID and body[0] & 0xF0 == 0x80
    assert codec.decode_events(body) == [m.TextDelta(request_id="req-1", seq=2, text="Hi")]
    topic, body = codec.split_frame(array)
    assert body[0] == 0x92
    assert [(e.seq, type(e)) for e in codec.decode_events(body)] == [(3, m.TextDelta), (4, m.TextEnd)]
    # replay_result.events: nested maps a plain msgpack library reads as maps
    plain = msgspec.msgpack.decode(replay)
    assert plain["events"] == [{"type": "text_delta", "request_id": "req-1", "seq": 2, "text": "Hi"}]
    reply = codec.decode_control_reply(error)
    assert type(reply) is m.ProtocolError and reply.error.error_class == "invalid_request"


def test_schema_carries_every_default_records_included():
    defs = json.loads(schema.render())["$defs"]
    missing = []
    for name, component in defs.items():
        cls = getattr(m, name, None)
        if not (isinstance(cls, type) and issubclass(cls, msgspec.Struct)):
            continue
        for field in msgspec.structs.fields(cls):
            if not field.required and "default" not in component["properties"].get(field.encode_name, {}):
                missing.append(f"{name}.{field.encode_name}")
    assert not missing
    assert defs["ReplayResult"]["properties"]["state"]["default"] == "unknown"
    assert defs["ReplayResult"]["properties"]["last_seq"]["default"] == -1
    assert defs["Response"]["properties"]["finish_reason"]["default"]["reason"] == "other"
    assert defs["ModelInfo"]["properties"]["rules"]["default"]["forced_tool_with_thinking"] is True
    # replay_result.events are event maps, typed as such
    assert defs["ReplayResult"]["properties"]["events"]["items"]["discriminator"]["propertyName"] == "type"


def test_a_default_read_from_the_schema_is_what_the_decoder_fills_in():
    """A type generated from schema.json and the daemon's decoder agree on an omitted field."""
    defs = json.loads(schema.render())["$defs"]
    decoded = codec.decode_control_reply(codec.encode({"type": "replay_result", "request_id": "r"}))
    for field, prop in defs["ReplayResult"]["properties"].items():
        if "default" in prop:
            assert msgspec.to_builtins(getattr(decoded, field)) == prop["default"]
    info = msgspec.convert({"id": "x:y", "provider": "x", "wire_name": "y"}, m.ModelInfo)
    for field, prop in defs["ModelInfo"]["properties"].items():
        if "default" in prop and field not in ("price", "rules"):
            assert msgspec.to_builtins(getattr(info, field)) == prop["default"]
    assert schema._expand(info.rules) == defs["ModelInfo"]["properties"]["rules"]["default"]


def test_the_defaults_table_names_every_non_zero_default():
    table = reference.render_defaults()
    for row in (
        "| `submit` (Submit) | `stream` | `true` |",
        '| `replay_result` (ReplayResult) | `state` | `"unknown"` |',
        '| `FinishReason` | `reason` | `"other"` |',
        '| `ToolChoice` | `mode` | `"auto"` |',
        '| `ResponseFormat` | `kind` | `"text"` |',
        "| `welcome` (Welcome) | `protocol` | `1` |",
    ):
        assert row in table
    assert "| `ModelInfo` | `configured`" not in table  # false is a zero value
