"""One request cannot hurt anyone else (issue 11): each attack runs beside an innocent
stream on the same provider, through the real daemon. The attacker gets its typed
error; the innocent stream completes, and the mock's worker is never restarted."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pynng
import pytest
import trio

from helpers import check_invariants, steps
from trunkline import Client, Message, Request
from trunkline.errors import ContextLengthError, InvalidRequestError
from trunkline.protocol import codec
from trunkline.protocol.messages import (
    ImagePart,
    ProtocolError,
    Rejected,
    StatusQuery,
    StatusReport,
    TextDelta,
    Timeouts,
    Welcome,
)

pytestmark = pytest.mark.e2e

WORDS = 40
PNG = "iVBORw0KGgo="


class Innocent:
    """A slow stream on the mock, started before the attack and checked after it."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self.started = trio.Event()
        self.done = trio.Event()

    async def run(self, client: Client) -> None:
        request = Request(
            model="mock:echo",
            messages=[Message.user("x")],
            provider_options=steps(*[{"text": f"w{i} ", "delay": 0.05} for i in range(WORDS)], {"finish": "stop"}),
        )
        async with client.stream(request) as stream:
            async for ev in stream:
                self.events.append(ev)
                if type(ev) is TextDelta:
                    self.started.set()
        self.done.set()

    def check(self) -> None:
        check_invariants(self.events)
        response = self.events[-1].response
        assert response.finish_reason.reason == "stop"
        assert response.text == "".join(f"w{i} " for i in range(WORDS))


@asynccontextmanager
async def beside_an_innocent(daemon) -> AsyncIterator[Client]:  # type: ignore[no-untyped-def]
    """A client with an innocent stream in flight; on leaving, the stream must have
    completed and the mock worker must be the one that served it from the start."""
    async with Client(daemon.runtime_dir) as client:
        innocent = Innocent()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(innocent.run, client)
            await innocent.started.wait()
            before = {w.provider: w for w in (await client.status()).workers}["mock"]
            yield client
            await innocent.done.wait()
        innocent.check()
        after = {w.provider: w for w in (await client.status()).workers}["mock"]
        assert (after.pid, after.restarts, after.state) == (before.pid, before.restarts, "running")
        assert (await client.complete("mock:echo", "still here")).text == "still here"
        assert (await client.status()).in_flight == 0  # nothing an attacker sent stays behind


class Raw:
    """A plain nng client, as a client in another language (or an attacker) would use."""

    def __init__(self, daemon) -> None:  # type: ignore[no-untyped-def]
        self.sock = pynng.Req0(resend_time=-1)
        self.sock.dial(daemon.control, block=True)

    async def ask(self, data: bytes) -> Any:
        with self.sock.new_context() as ctx:
            await ctx.asend(data)
            return codec.decode_control_reply(await ctx.arecv())

    def close(self) -> None:
        self.sock.close()


def submit(request: dict[str, Any], request_id: str = "attack", client_id: str = "c-attacker") -> bytes:
    return codec.encode(
        {
            "type": "submit",
            "request_id": request_id,
            "client_id": client_id,
            "request": {
                "model": "mock:echo",
                "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}],
                **request,
            },
        }
    )


# -- 1. numbers that crashed the worker -------------------------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {"timeouts": Timeouts(request_s=-1)},
        {"timeouts": Timeouts(request_s=float("nan"))},
        {"timeouts": Timeouts(stream_idle_s=float("nan"))},
        {"temperature": float("inf")},
        {"provider_options": steps({"text": "a", "delay": -5})},
        {"provider_options": steps({"tool_call": {"name": "f", "chunks": 0}})},
    ],
)
async def test_a_bad_number_is_refused_and_the_worker_keeps_serving(daemon, fields):
    with trio.fail_after(30):
        async with beside_an_innocent(daemon) as client:
            with pytest.raises(InvalidRequestError) as info:
                await client.complete("mock:echo", "poison", **fields)
            field = next(iter(fields))
            assert field.split("_")[0] in info.value.message, info.value.message


# -- 2. local files ------------------------------------------------------------------------


async def test_the_daemon_never_opens_a_path_a_client_names(start_daemon, tmp_path):
    daemon = await start_daemon(env={"OPENROUTER_API_KEY": "sk-or-not-for-mock", "TRUNKLINE_TOKEN": "tok-secret"})
    raw = Raw(daemon)
    fifo = tmp_path / "hang.png"
    os.mkfifo(fifo)
    (tmp_path / "cat.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    try:
        with trio.fail_after(30):
            async with beside_an_innocent(daemon) as client:
                welcome = await raw.ask(codec.encode({"type": "hello", "client_name": "attacker"}))
                for path in ("/proc/self/environ", "/dev/zero", str(fifo)):
                    reply = await raw.ask(
                        submit(
                            {
                                "messages": [
                                    {
                                        "role": "user",
                                        "content": [{"type": "text", "text": "x"}, {"type": "image", "path": path}],
                                    }
                                ]
                            },
                            client_id=welcome.client_id,
                        )
                    )
                    assert type(reply) is Rejected and reply.error.error_class == "invalid_request"
                    assert "does not read local files" in reply.error.message
                # The Python client reads its own files, and refuses what is not a regular file.
                with pytest.raises(InvalidRequestError, match="not a regular file"):
                    await client.complete("mock:echo", Message.user("x", ImagePart(path=str(fifo))))
                ok = await client.complete(
                    "mock:echo", Message.user("what is this?", ImagePart(path=str(tmp_path / "cat.png")))
                )
                assert ok.text == "what is this?"
                mock = {w.provider: w for w in (await client.status()).workers}["mock"]
        environ = Path(f"/proc/{mock.pid}/environ").read_bytes()
        assert b"sk-or-not-for-mock" not in environ and b"tok-secret" not in environ
        assert b"TRUNKLINE_TOKEN" not in environ and b"PATH=" in environ
    finally:
        raw.close()


# -- 3. a prompt at the size limit ---------------------------------------------------------


async def test_a_prompt_near_the_size_limit_is_refused_without_freezing_the_daemon(daemon):
    prompt = "word " * (3 * 1024 * 1024)  # 15 MiB, under the 16 MiB limit
    with trio.fail_after(60):
        async with beside_an_innocent(daemon) as client:
            with pytest.raises(ContextLengthError, match="over the 8192-token context"):
                await client.complete("mock:basic", prompt)
            count = await client.count_tokens("mock:basic", prompt)
            assert 2_800_000 < count.input_tokens < 3_500_000  # each "word " is one token


# -- 4. deep nesting -------------------------------------------------------------------------


async def test_deep_nesting_is_a_protocol_error_that_leaves_nothing_running(daemon):
    head = submit({"provider_options": {"mock": {"x": 0}}})
    assert head.endswith(b"\xa1x\x00")
    raw = Raw(daemon)
    try:
        with trio.fail_after(30):
            async with beside_an_innocent(daemon):
                for depth in (70, 980, 3000):
                    reply = await raw.ask(head[:-1] + b"\x91" * depth + b"\x01")
                    assert type(reply) is ProtocolError, reply
                    assert reply.error.error_class == "invalid_request"
                    assert "nested" in reply.error.message and "64 levels" in reply.error.message
                status = await raw.ask(codec.encode(StatusQuery()))
                assert type(status) is StatusReport
                assert status.in_flight == 1  # the innocent stream alone
    finally:
        raw.close()


# -- 5. untyped replies and the log --------------------------------------------------------


async def test_unreadable_input_gets_its_class_and_one_rate_limited_log_line(start_daemon):
    limit = 64 * 1024
    daemon = await start_daemon({"limits": {"max_message_bytes": limit}})
    hello = codec.encode({"type": "hello", "client_name": ""})
    at_limit = codec.encode({"type": "hello", "client_name": "x" * (limit - len(hello) - 2)})
    assert len(at_limit) == limit
    over = codec.encode({"type": "hello", "client_name": "x" * (limit - len(hello) - 1)})
    bad = [
        (b"\x82\xa4type\xa5hello\xabclient_name\xa2\xff\xfe", "UTF-8"),
        (b"\x82\xa4type\xa5hello\xa1x" + b"\x91" * 5000 + b"\x01", "nested"),
        (over, "exceeds the limit"),
    ]
    raw = Raw(daemon)
    try:
        with trio.fail_after(60):
            async with beside_an_innocent(daemon):
                started = time.monotonic()
                for _ in range(30):
                    for data, words in bad:
                        reply = await raw.ask(data)
                        assert type(reply) is ProtocolError, reply
                        assert reply.error.error_class == "invalid_request", reply.error
                        assert words in reply.error.message, reply.error.message
                elapsed = time.monotonic() - started
                # A message exactly at the limit is within it: answered as any other.
                assert type(await raw.ask(at_limit)) is Welcome
    finally:
        raw.close()
    await daemon.stop()
    output = daemon.output()
    assert "Traceback" not in output and "internal error" not in output
    lines = [line for line in daemon.lines if "unreadable control request" in line]
    assert 1 <= len(lines) <= 5 * (elapsed + 2), (len(lines), elapsed)  # 90 bad inputs, at most 5 lines a second


# -- 6. media the providers would refuse ----------------------------------------------------


@pytest.mark.parametrize(
    ("part", "words"),
    [
        (ImagePart(url="file:///etc/passwd"), "only https, http and data: URLs"),
        (ImagePart(url="gopher://host/x"), "only https, http and data: URLs"),
        (ImagePart(url="https:///no-host.png"), "has no host"),
        (ImagePart(data="***not base64***", media_type="image/png"), "not valid base64"),
        (ImagePart(data=PNG, media_type="application/x-msdownload"), "not an accepted image type"),
        (ImagePart(url="data:image/png;base64,%%%%"), "not valid base64"),
    ],
)
async def test_bad_media_is_refused_before_any_provider_call(daemon, part, words):
    with trio.fail_after(30):
        async with beside_an_innocent(daemon) as client:
            with pytest.raises(InvalidRequestError, match=words):
                await client.complete("mock:echo", Message.user("look", part))
