"""The same client from asyncio programs and from blocking code."""

from __future__ import annotations

import sys
import textwrap

import pytest
import trio

pytestmark = pytest.mark.e2e

ASYNCIO_PROGRAM = textwrap.dedent("""
    import asyncio, sys
    from trunkline import Client, Message

    async def main():
        async with Client(sys.argv[1]) as client:
            response = await client.complete("mock:echo", "from asyncio")
            chunks = []
            async with client.stream("mock:echo", [Message.user("streamed too")]) as stream:
                async for text in stream.text_stream:
                    chunks.append(text)
            status = await client.status()
            print(response.text, "|", "".join(chunks), "|", status.workers[0].state)

    asyncio.run(main())
""")

SYNC_PROGRAM = textwrap.dedent("""
    import sys
    from trunkline import SyncClient
    from trunkline.protocol.messages import TextDelta

    with SyncClient(sys.argv[1]) as client:
        response = client.complete("mock:echo", "blocking call")
        deltas = [e.text for e in client.stream("mock:echo", "one two three") if type(e) is TextDelta]
        print(response.text, "|", len(deltas), "|", [m.id for m in client.list_models("mock")])
""")


async def test_client_works_under_asyncio(daemon):
    result = await trio.run_process(
        [sys.executable, "-c", ASYNCIO_PROGRAM, str(daemon.runtime_dir)],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().strip() == "from asyncio | streamed too | running"


async def test_sync_client(daemon):
    result = await trio.run_process(
        [sys.executable, "-c", SYNC_PROGRAM, str(daemon.runtime_dir)],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().strip() == "blocking call | 3 | ['mock:echo', 'mock:basic']"


MISUSE_PROGRAM = textwrap.dedent("""
    import asyncio, sys
    import trio
    from trunkline import Client, SyncClient

    where = sys.argv[1]

    def said(call):
        try:
            call()
        except RuntimeError as exc:
            return str(exc)
        return "no error"

    async def inside_trio():
        with SyncClient(where) as client:
            client.complete("mock:echo", "never sent")

    async def inside_asyncio():
        with SyncClient(where) as client:
            client.complete("mock:echo", "never sent")

    async def async_client_misuse():
        client = Client(where)
        unopened = "no error"
        try:
            await client.complete("mock:echo", "x")
        except RuntimeError as exc:
            unopened = str(exc)
        async with client:
            pass
        try:
            await client.status()
        except RuntimeError as exc:
            return unopened, str(exc)

    print("trio:", said(lambda: trio.run(inside_trio)))
    print("asyncio:", said(lambda: asyncio.run(inside_asyncio())))
    print("sync without with:", said(lambda: SyncClient(where).complete("mock:echo", "x")))
    unopened, closed = trio.run(async_client_misuse)
    print("async without with:", unopened)
    print("after close:", closed)
    with SyncClient(where) as client:  # the right way still works after all that
        print("blocking:", client.complete("mock:echo", "fine").text)
""")


async def test_clients_used_the_wrong_way_say_what_to_write_instead(daemon):
    """A SyncClient inside an event loop used to hang for good; a client used without its
    `with` block raised a bare AssertionError."""
    with trio.fail_after(60):
        result = await trio.run_process(
            [sys.executable, "-c", MISUSE_PROGRAM, str(daemon.runtime_dir)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert result.returncode == 0, result.stderr.decode()
    lines = dict(line.split(": ", 1) for line in result.stdout.decode().splitlines())
    assert "runs a trio event loop" in lines["trio"] and "`async with Client() as client:`" in lines["trio"]
    assert "runs an asyncio event loop" in lines["asyncio"] and "asyncio.to_thread" in lines["asyncio"]
    assert "use it as `with SyncClient() as client:`" in lines["sync without with"]
    assert "use it as `async with Client() as client:`" in lines["async without with"]
    assert "this Client is closed" in lines["after close"]
    assert lines["blocking"] == "fine"
