"""The supervisor's one log line per request, at `info`: how it ended (finish reason and
tokens, or the error class) and how long it took, read by the daemon from the request's
terminal event."""

from __future__ import annotations

import re

import pytest
import trio

from trunkline import Client
from trunkline.errors import TrunklineError


async def test_each_request_ends_with_one_line_saying_how(daemon):
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            answered = await client.complete("mock:echo", "hello there", request_id="req-log-finish")
            async with client.stream("mock:echo", "streamed", request_id="req-log-stream") as stream:
                streamed = await stream.response()
            with pytest.raises(TrunklineError) as refused:
                await client.complete("mock:no-such-model", "hi", request_id="req-log-error")
        finish = await daemon.wait_for_line("request req-log-finish ")
        stream_line = await daemon.wait_for_line("request req-log-stream ")
        error = await daemon.wait_for_line("request req-log-error ")
    usage = answered.usage
    assert re.search(
        rf"trunkline\.supervisor INFO request req-log-finish mock:echo complete: "
        rf"{answered.finish_reason.reason}, {usage.input_tokens} in / {usage.output_tokens} out in \d+ ms$",
        finish,
    ), finish
    usage = streamed.usage
    assert re.search(
        rf"request req-log-stream mock:echo stream: stop, {usage.input_tokens} in / {usage.output_tokens} out "
        r"in \d+ ms$",
        stream_line,
    ), stream_line
    assert usage.output_tokens > 0
    assert re.search(
        rf"request req-log-error mock:no-such-model complete: error {refused.value.error_class} in \d+ ms$", error
    ), error
