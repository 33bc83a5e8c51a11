from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import trio

from helpers import DaemonProcess
from redis_server import RedisServer


@pytest.fixture
async def start_daemon(nursery: trio.Nursery) -> AsyncIterator[Callable[..., Awaitable[DaemonProcess]]]:
    """Start real daemons (`config` is merged over fast test timings); all stop at teardown."""
    started: list[DaemonProcess] = []

    async def start(config: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> DaemonProcess:
        d = DaemonProcess(config, env)
        started.append(d)
        await d.start(nursery)
        if d.exited.is_set():
            raise RuntimeError(f"daemon exited at start:\n{d.output()}")
        return d

    try:
        yield start
    finally:
        for d in started:
            try:
                if d.proc is not None and d.proc.returncode is None:
                    await d.stop()
            finally:
                d.cleanup()


@pytest.fixture
async def daemon(start_daemon: Callable[..., Awaitable[DaemonProcess]]) -> DaemonProcess:
    return await start_daemon()


@pytest.fixture
async def redis_server(nursery: trio.Nursery) -> AsyncIterator[RedisServer]:
    """A real redis-server of this test's own on a free port (tests/redis_server.py)."""
    server = RedisServer()
    try:
        yield await server.start(nursery)
    finally:
        await server.kill()
