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
    result = await trio.run_process([sys.executable, "-c", ASYNCIO_PROGRAM, str(daemon.runtime_dir)],
                                    capture_stdout=True, capture_stderr=True, check=False)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().strip() == "from asyncio | streamed too | running"


async def test_sync_client(daemon):
    result = await trio.run_process([sys.executable, "-c", SYNC_PROGRAM, str(daemon.runtime_dir)],
                                    capture_stdout=True, capture_stderr=True, check=False)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().strip() == "blocking call | 3 | ['mock:echo', 'mock:basic']"
