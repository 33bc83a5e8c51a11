"""Thousands of arbitrary control messages at a live daemon: every one gets a reply that
reads as a control reply, and the daemon keeps answering `status` and serving requests.

Hypothesis makes the messages (raw bytes, arbitrary msgpack, and maps shaped like
real requests with arbitrary values); they are then sent one at a time over a plain
nng socket. In CI the campaign is a fixed, derandomized one of
`TRUNKLINE_FUZZ_EXAMPLES` (default 2000) messages; `make fuzz` runs a long random
one (tens of thousands) outside CI.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import msgspec
import pynng
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trunkline import Client
from trunkline.protocol import codec
from trunkline.protocol.messages import ControlRequest, StatusQuery, StatusReport

pytestmark = pytest.mark.e2e

EXAMPLES = int(os.environ.get("TRUNKLINE_FUZZ_EXAMPLES", "2000"))
RANDOM = os.environ.get("TRUNKLINE_FUZZ_RANDOM") == "1"
STATUS_EVERY = 100

TAGS = sorted(t.__struct_config__.tag for t in ControlRequest.__args__)  # type: ignore[attr-defined]
FIELDS = [
    "request_id",
    "client_id",
    "request",
    "stream",
    "operation_id",
    "token",
    "protocol",
    "client_name",
    "from_seq",
    "model",
    "provider",
    "messages",
    "content",
    "role",
    "text",
    "type",
    "url",
    "data",
    "path",
    "media_type",
    "timeouts",
    "request_s",
    "stream_idle_s",
    "temperature",
    "max_tokens",
    "provider_options",
    "mock",
    "steps",
    "delay",
    "tools",
    "parameters",
    "seed",
    "top_p",
]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=20)
    | st.sampled_from(TAGS + FIELDS + ["mock:echo", "user"])
    # msgpack's own types beyond JSON: extension values and timestamps.
    | st.builds(msgspec.msgpack.Ext, st.integers(-128, 127), st.binary(max_size=17))
    | st.datetimes(timezones=st.just(datetime.UTC))
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=24,
)


@st.composite
def request_like(draw: st.DrawFn) -> dict[str, Any]:
    """A `request` map near enough to a real one to get past the first checks."""
    text = st.text(max_size=30)
    typed = {
        "text": text,
        "url": st.sampled_from(
            ["https://example.com/a.png", "file:///etc/passwd", "data:,x", "http://[::1", "https:///x"]
        )
        | text,
        "data": st.sampled_from(["iVBORw0KGgo=", "***", ""]) | text,
        "path": st.sampled_from(["/etc/passwd", "/dev/zero", "/proc/self/environ"]),
        "media_type": st.sampled_from(["image/png", "application/pdf", "text/plain", "x/y"]) | text,
    }
    part = st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image", "document", "audio", "tool_call"])},
        optional={k: typed[k] | values for k in typed},
    )
    message = st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "system", "tool", "x"])},
        optional={"content": st.lists(part, max_size=3)},
    )
    first = {"type": "text", "text": draw(st.text(min_size=1, max_size=20))}
    plausible = st.lists(part, max_size=2).map(lambda extra: [{"role": "user", "content": [first, *extra]}])
    out = {
        "model": draw(st.sampled_from(["mock:echo", "mock:basic", "echo", "nope:x"]) | st.text(max_size=8)),
        "messages": draw(plausible | st.lists(message, max_size=3)),
    }
    out.update(
        draw(
            st.dictionaries(
                st.sampled_from(
                    [
                        "timeouts",
                        "temperature",
                        "top_p",
                        "max_tokens",
                        "seed",
                        "provider_options",
                        "tools",
                        "response_format",
                        "max_retries",
                        "stop_sequences",
                    ]
                ),
                values,
                max_size=3,
            )
        )
    )
    return out


shaped = st.builds(
    lambda tag, extra, request: {"type": tag, **extra, **({"request": request} if request else {})},
    st.sampled_from(TAGS),
    st.dictionaries(st.sampled_from(FIELDS), values, max_size=4),
    st.none() | request_like(),
)

submits = st.builds(
    lambda rid, stream, request: {
        "type": "submit",
        "request_id": rid,
        "client_id": "c-fuzz",
        "stream": stream,
        "request": request,
    },
    st.text(min_size=1, max_size=12),
    st.booleans(),
    request_like(),
)

messages = (
    st.binary(max_size=300)
    | values.map(msgspec.msgpack.encode)
    | shaped.map(msgspec.msgpack.encode)
    | submits.map(msgspec.msgpack.encode)
)


def campaign(n: int) -> list[bytes]:
    out: list[bytes] = []

    @settings(
        max_examples=n, database=None, deadline=None, derandomize=not RANDOM, suppress_health_check=list(HealthCheck)
    )
    @given(messages)
    def collect(data: bytes) -> None:
        out.append(data)

    collect()
    return out


async def test_arbitrary_control_messages_never_stop_the_daemon(daemon):
    inputs = campaign(EXAMPLES)
    sock = pynng.Req0(resend_time=-1)
    sock.dial(daemon.control, block=True)
    replies: dict[str, int] = {}
    try:
        with trio.fail_after(120 + EXAMPLES * 0.05):
            for i, data in enumerate(inputs):
                with sock.new_context() as ctx:
                    await ctx.asend(data)
                    with trio.fail_after(10):
                        raw = await ctx.arecv()
                reply = codec.decode_control_reply(raw)  # every reply is a well-formed control reply
                name = type(reply).__name__
                replies[name] = replies.get(name, 0) + 1
                if name == "ProtocolError":
                    assert reply.error.error_class == "invalid_request", (data[:200], reply.error)
                if i % STATUS_EVERY == 0:
                    with sock.new_context() as ctx:
                        await ctx.asend(codec.encode(StatusQuery()))
                        with trio.fail_after(10):
                            assert type(codec.decode_control_reply(await ctx.arecv())) is StatusReport
            async with Client(daemon.runtime_dir) as client:
                response = await client.complete("mock:echo", "still serving")
                assert response.text == "still serving"
    finally:
        sock.close()
    assert "Traceback" not in daemon.output(), daemon.output()[-3000:]
    assert sum(replies.values()) == len(inputs)
    assert replies.get("ProtocolError", 0) < len(inputs)  # not everything was refused as unreadable
    print("replies:", replies)
