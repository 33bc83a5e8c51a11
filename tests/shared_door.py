"""One daemon with its front door for a whole test module, behind which every provider answers:
the mock, and OpenAI, Anthropic and Gemini served by fake upstreams on 127.0.0.1 (scripted
through the cross-provider harnesses of `fakes.providers`).

Starting a daemon costs more than most tests take, so it starts once, in a trio loop on a
background thread (pytest-trio gives every test its own loop, which cannot hold it across
tests). Only plain data crosses threads: a test sets an upstream's routes and reads what it
was sent while the test's own calls, over HTTP, wait for their answers.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import trio

from door import KEY
from fakes.providers import (
    ANTHROPIC_KEY,
    GEMINI_KEY,
    OPENAI_KEY,
    AnthropicHarness,
    GeminiHarness,
    OpenAIHarness,
)
from fakes.upstream import FakeUpstream
from helpers import DaemonProcess


class SharedDoor:
    """`with SharedDoor() as door:` a running daemon, its door at `door.url`."""

    def __init__(self) -> None:
        self.url = ""
        self.key = KEY
        self.daemon: DaemonProcess | None = None
        self.openai = OpenAIHarness()
        self.anthropic = AnthropicHarness()
        self.gemini = GeminiHarness()
        self._started = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._done: trio.Event | None = None
        self._thread = threading.Thread(target=trio.run, args=(self._serve,), name="responses-door", daemon=True)

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    @property
    def harnesses(self) -> tuple[OpenAIHarness, AnthropicHarness, GeminiHarness]:
        return self.openai, self.anthropic, self.gemini

    def forget(self) -> None:
        """Forget what the upstreams were sent (each test reads only its own)."""
        for harness in self.harnesses:
            harness.upstream.requests.clear()

    def __enter__(self) -> SharedDoor:
        self._thread.start()
        if not self._started.wait(60):
            raise RuntimeError("the shared door did not start in 60 s")
        if not self.url:
            output = self.daemon.output() if self.daemon is not None else ""
            raise RuntimeError(f"the shared door did not start:\n{output}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None and self._done is not None:
            trio.from_thread.run_sync(self._done.set, trio_token=self._token)
        self._thread.join(60)
        assert not self._thread.is_alive(), "the shared door's daemon did not stop"

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._done = trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                try:
                    with trio.fail_after(60):
                        await self._start(nursery)
                finally:
                    self._started.set()  # __enter__ looks: started, or failed (the thread prints why)
                await self._done.wait()
                assert self.daemon is not None
                await self.daemon.stop()
                nursery.cancel_scope.cancel()
        finally:
            if self.daemon is not None:
                self.daemon.cleanup()

    async def _start(self, nursery: trio.Nursery) -> None:
        for harness in self.harnesses:
            harness.upstream = await FakeUpstream().start(nursery)
        config: dict[str, Any] = {
            "http": {"listen": "127.0.0.1:0", "keys_env": ["TL_TEST_DOOR_KEY"]},
            "providers": {
                "anthropic": {"base_url": self.anthropic.upstream.base_url},
                "gemini": {"base_url": self.gemini.upstream.base_url},
            },
        }
        env = {
            "TL_TEST_DOOR_KEY": KEY,
            "OPENAI_API_KEY": OPENAI_KEY,
            "OPENAI_BASE_URL": self.openai.upstream.base_url + "/v1",
            "OPENAI_ORG_ID": "",
            "OPENAI_PROJECT_ID": "",
            "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
            "GEMINI_API_KEY": GEMINI_KEY,
            "GOOGLE_API_KEY": "",
        }
        self.daemon = DaemonProcess(config, env)
        await self.daemon.start(nursery)
        line = await self.daemon.wait_for_line("HTTP front door on ")
        await self.daemon.wait_for_line("http: process 0 serving")
        match = re.search(r"HTTP front door on (http://\S+)", line)
        assert match, line
        self.url = match.group(1)
