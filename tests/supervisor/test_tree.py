"""The supervisor's children against a real daemon: the request table alone says which
requests a provider runs, for `status` and for a worker's death."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
import trio

from helpers import steps
from trunkline import Client, Message, Request
from trunkline.protocol.messages import ErrorEvent, Finish, TextDelta

pytestmark = pytest.mark.e2e


def held(model: str) -> Request:
    """A stream that says one word, then waits for a minute: it runs until it is ended."""
    return Request(
        model=model,
        messages=[Message.user("x")],
        provider_options=steps({"text": "w"}, {"delay": 60, "finish": "stop"}),
    )


async def rest_of(stream: Any) -> list[Any]:
    return [event async for event in stream]


async def test_a_dead_worker_ends_its_own_requests_and_status_counts_each_providers(start_daemon):
    daemon = await start_daemon(
        {"providers": {"other": {"type": "mock"}}, "models": {"other:echo": {"wire_name": "echo"}}}
    )
    with trio.fail_after(30):
        async with (
            Client(daemon.runtime_dir) as client,
            client.stream(held("mock:echo")) as first,
            client.stream(held("mock:echo")) as second,
            client.stream(held("other:echo")) as elsewhere,
        ):
            for stream in (first, second, elsewhere):  # each has reached its worker and is running
                while type(await stream.__anext__()) is not TextDelta:
                    pass
            status = await client.status()
            running = {w.provider: w.in_flight for w in status.workers}
            assert (running["mock"], running["other"], status.in_flight) == (2, 1, 3)

            os.kill({w.provider: w.pid for w in status.workers}["mock"], signal.SIGKILL)
            ends = [(await rest_of(stream))[-1] for stream in (first, second)]
            status = await client.status()
            running = {w.provider: w.in_flight for w in status.workers}
            assert (running["mock"], running["other"], status.in_flight) == (0, 1, 1)

            assert await elsewhere.cancel()
            last = (await rest_of(elsewhere))[-1]
            status = await client.status()
    for end in ends:
        assert type(end) is ErrorEvent and end.error.error_class == "unavailable"
        assert "mock worker died mid-request" in end.error.message
    assert type(last) is Finish and last.response.finish_reason.reason == "cancelled"  # untouched by the death
    assert status.in_flight == 0 and all(w.in_flight == 0 for w in status.workers)
