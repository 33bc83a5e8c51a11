"""A daemon with its HTTP front door on a free port of 127.0.0.1 (found in the log)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
import trio

from helpers import DaemonProcess, deep_merge

KEY = "tl-test-door-key-0123456789"


@dataclass
class Door:
    daemon: DaemonProcess
    url: str  # http://127.0.0.1:PORT
    key: str = KEY

    @property
    def base_url(self) -> str:
        """What an OpenAI SDK takes as its base URL (the Anthropic SDK takes `url`)."""
        return self.url + "/v1"


async def start_door(
    start_daemon: Callable[..., Awaitable[DaemonProcess]],
    config: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    keys: bool = True,
) -> Door:
    http: dict[str, Any] = {"listen": "127.0.0.1:0"}
    if keys:
        http["keys_env"] = ["TL_TEST_DOOR_KEY"]
    daemon = await start_daemon(deep_merge({"http": http}, config or {}), env={"TL_TEST_DOOR_KEY": KEY, **(env or {})})
    with trio.fail_after(30):
        line = await daemon.wait_for_line("HTTP front door on ")
        await daemon.wait_for_line("http: process 0 serving")
    match = re.search(r"HTTP front door on (http://\S+)", line)
    assert match, line
    return Door(daemon, match.group(1))


@pytest.fixture
async def door(start_daemon: Callable[..., Awaitable[DaemonProcess]]) -> Door:
    return await start_door(start_daemon)
