"""Every msgpack type in every free-form field of a submit, sent to a live daemon.

msgpack can carry more than JSON: extension values, timestamps, binary, floats of
32 bits, map keys that are not strings. One extension value inside a schema once
stopped the whole daemon. Whatever the value, the daemon answers (accepted,
rejected, or a `protocol_error` naming the field for a value JSON cannot hold),
its worker stays up, and the next request is served.
"""

from __future__ import annotations

import struct
from typing import Any

import msgspec
import pynng
import pytest
import trio

from trunkline import Client
from trunkline.protocol import codec
from trunkline.protocol.messages import (
    Accepted,
    ErrorEvent,
    Finish,
    Hello,
    Probe,
    ProtocolError,
    Rejected,
    StatusQuery,
)

pytestmark = pytest.mark.e2e

Raw = msgspec.Raw


def packed(value: Any) -> Raw:
    return Raw(msgspec.msgpack.encode(value))


#: (name, raw msgpack, whether JSON can hold it; None: not even readable as msgpack
#: data): each msgpack format family at least once.
VALUES: list[tuple[str, Raw, bool | None]] = [
    ("nil", Raw(b"\xc0"), True),
    ("false", Raw(b"\xc2"), True),
    ("true", Raw(b"\xc3"), True),
    ("positive fixint", Raw(b"\x07"), True),
    ("negative fixint", Raw(b"\xe0"), True),
    ("uint8", Raw(b"\xcc\xff"), True),
    ("uint16", Raw(b"\xcd\xff\xff"), True),
    ("uint32", Raw(b"\xce\xff\xff\xff\xff"), True),
    ("uint64 max", Raw(b"\xcf" + b"\xff" * 8), True),
    ("int8", Raw(b"\xd0\x80"), True),
    ("int16", Raw(b"\xd1\x80\x00"), True),
    ("int32", Raw(b"\xd2\x80\x00\x00\x00"), True),
    ("int64 min", Raw(b"\xd3\x80" + b"\x00" * 7), True),
    ("float32", Raw(b"\xca" + struct.pack(">f", 1.5)), True),
    ("float64", Raw(b"\xcb" + struct.pack(">d", 2.25)), True),
    ("fixstr", packed("short"), True),
    ("str8", packed("s" * 40), True),
    ("str16", packed("s" * 300), True),
    ("fixarray", packed([1, "a", None]), True),
    ("array16", packed(list(range(20))), True),
    ("fixmap", packed({"a": 1}), True),
    ("map16", packed({f"k{i}": i for i in range(20)}), True),
    ("bin8", Raw(b"\xc4\x03abc"), False),
    ("bin16", Raw(b"\xc5\x01\x00" + b"b" * 256), False),
    ("bin32", Raw(b"\xc6\x00\x00\x00\x02hi"), False),
    ("fixext1", Raw(b"\xd4\x05\x01"), False),
    ("fixext2", Raw(b"\xd5\x05\x01\x02"), False),
    ("fixext4", Raw(b"\xd6\x05" + b"\x01" * 4), False),
    ("fixext8", Raw(b"\xd7\x05" + b"\x01" * 8), False),
    ("fixext16", Raw(b"\xd8\x05" + b"\x01" * 16), False),
    ("ext8", Raw(b"\xc7\x03\x05abc"), False),
    ("ext16", Raw(b"\xc8\x00\x03\x7fabc"), False),
    ("ext32", Raw(b"\xc9\x00\x00\x00\x03\x80abc"), False),
    ("timestamp32", Raw(b"\xd6\xff\x00\x00\x00\x01"), False),
    ("timestamp64", Raw(b"\xd7\xff" + b"\x00" * 7 + b"\x01"), False),
    ("timestamp96", Raw(b"\xc7\x0c\xff" + b"\x00" * 11 + b"\x01"), False),
    ("map with an int key", Raw(b"\x81\x01\x02"), False),
    ("map with a nil key", Raw(b"\x81\xc0\x02"), False),
    ("map with a bin key", Raw(b"\x81\xc4\x01k\x02"), False),
    ("map with an array key", Raw(b"\x81\x92\x01\x02\x03"), False),
    ("map with a map key", Raw(b"\x81\x81\xa1a\x01\x02"), None),  # msgspec itself refuses it
    ("ext nested in an array", Raw(b"\x92\x01\xd4\x05\x01"), False),
]


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def with_value(field: str, value: Raw) -> tuple[dict[str, Any], str]:
    """A mock request carrying `value` in the free-form field `field`, and the place an
    error must name."""
    request: dict[str, Any] = {"model": "mock:echo", "messages": [user("hi")]}
    if field == "provider_options":
        request["provider_options"] = {"anthropic": {"metadata": {"v": value}}}
        return request, "provider_options.anthropic"
    if field == "tool parameters":
        request["tools"] = [{"name": "t", "parameters": {"type": "object", "properties": {"a": value}}}]
        return request, "tools[0].parameters"
    if field == "response schema":
        request["response_format"] = {"kind": "json_schema", "name": "s", "schema": {"type": "object", "x": value}}
        return request, "response_format.schema"
    if field == "tool call arguments":
        request["messages"] = [
            user("use the tool"),
            {
                "role": "assistant",
                "content": [{"type": "tool_call", "id": "tu_1", "name": "t", "arguments": {"a": value}}],
            },
            {"role": "tool", "content": [{"type": "tool_result", "tool_call_id": "tu_1", "content": "ok"}]},
        ]
        return request, "messages[1].content[0].arguments"
    if field == "provider part data":
        request["messages"] = [
            user("hi"),
            {
                "role": "assistant",
                "content": [{"type": "provider_part", "api": "anthropic", "kind": "x", "data": value}],
            },
            user("again"),
        ]
        return request, "messages[1].content[0].data"
    raise AssertionError(field)


FIELDS = ["provider_options", "tool parameters", "response schema", "tool call arguments", "provider part data"]


async def test_every_msgpack_type_in_every_free_form_field(daemon):
    sock = pynng.Req0(resend_time=-1)
    sock.dial(daemon.control, block=True)
    sub = pynng.Sub0()

    async def ask(data: bytes) -> Any:
        with sock.new_context() as ctx:
            await ctx.asend(data)
            with trio.fail_after(10):
                return codec.decode_control_reply(await ctx.arecv())

    seen: dict[str, int] = {}
    accepted: set[str] = set()
    try:
        with trio.fail_after(120):
            welcome = await ask(codec.encode(Hello(client_name="free-form")))
            sub.subscribe(codec.topic_prefix(welcome.client_id))
            sub.dial(welcome.event_endpoint, block=True)
            while True:  # publish-subscribe: live once a probe comes through
                await ask(codec.encode(Probe(client_id=welcome.client_id)))
                with trio.move_on_after(0.1):
                    await sub.arecv()
                    break
            for field in FIELDS:
                for name, value, is_json in VALUES:
                    request, where = with_value(field, value)
                    submit = {
                        "type": "submit",
                        "request_id": f"{field}-{name}",
                        "client_id": welcome.client_id,
                        "stream": False,
                        "request": request,
                    }
                    reply = await ask(msgspec.msgpack.encode(submit))
                    kind = type(reply).__name__
                    seen[kind] = seen.get(kind, 0) + 1
                    if is_json:
                        # JSON it can be: whether the request is taken is for validation to say.
                        assert type(reply) in (Accepted, Rejected), (field, name, reply)
                        if type(reply) is Accepted:
                            accepted.add(reply.request_id)
                    else:
                        assert type(reply) is ProtocolError, (field, name, reply)
                        assert reply.error.error_class == "invalid_request"
                        named = "malformed msgpack" if is_json is None else f"request.{where}"
                        assert named in reply.error.message, (field, name, reply.error.message)
            # Every accepted request ends with its one terminal event.
            cut = len(codec.topic_prefix(welcome.client_id))
            while accepted:
                for ev in codec.decode_events(memoryview(await sub.arecv())[cut:]):
                    if type(ev) in (Finish, ErrorEvent):
                        accepted.discard(ev.request_id)
            status = await ask(codec.encode(StatusQuery()))
            mock = next(w for w in status.workers if w.provider == "mock")
            assert mock.state == "running" and mock.restarts == 0, mock
            async with Client(daemon.runtime_dir) as client:
                assert (await client.complete("mock:echo", "still serving")).text == "still serving"
    finally:
        sock.close()
        sub.close()
    assert daemon.proc.returncode is None
    assert "Traceback" not in daemon.output(), daemon.output()[-3000:]
    assert seen.get("Accepted"), seen  # the JSON values did reach the worker
    print("replies:", seen)
