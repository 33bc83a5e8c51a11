"""One daemon with its front door for a whole test module, its Anthropic and OpenAI
providers pointed at fake upstreams on 127.0.0.1 (the mock needs none).

Starting a daemon costs more than most of these tests take, so it starts once, in a
trio loop of its own on a background thread (pytest-trio gives every test its own
loop, which cannot hold it across tests), as `fakes.providers.SharedHarnesses` does.
Only plain data crosses threads: a test sets its upstream's routes and reads what
was sent while its own call waits for the answer."""

from __future__ import annotations

import json
import threading
from typing import Any

import trio

from door import Door, start_door
from fakes.upstream import FakeUpstream
from helpers import REPO, DaemonProcess

#: Real Anthropic traffic other projects recorded (see its README), when present.
RECORDINGS = REPO.parent / "shared" / "recordings" / "anthropic"

ANTHROPIC_KEY = "fake-anthropic-key-never-to-be-seen-0123456789"
OPENAI_KEY = "sk-fake-openai-key-never-to-be-seen-0123456789"


class SharedDoor:
    def __init__(self) -> None:
        self.anthropic = FakeUpstream()
        self.openai = FakeUpstream()
        self.door: Door | None = None
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=trio.run, args=(self._serve,), name="anthropic-door", daemon=True)
        self._token: trio.lowlevel.TrioToken | None = None
        self._done: trio.Event | None = None
        self._daemons: list[DaemonProcess] = []

    def __enter__(self) -> SharedDoor:
        self._thread.start()
        if not self._ready.wait(60):
            raise RuntimeError("the door's daemon did not start in 60 s")
        if self._failed is not None:
            raise RuntimeError("the door's daemon did not start") from self._failed
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None and self._done is not None
        trio.from_thread.run_sync(self._done.set, trio_token=self._token)
        self._thread.join(60)
        assert not self._thread.is_alive(), "the door's daemon did not stop"

    def forget(self) -> None:
        """Forget what the upstreams were sent and their routes (one daemon serves many tests)."""
        for upstream in (self.anthropic, self.openai):
            upstream.requests.clear()
            upstream.routes.clear()

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._done = trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                try:
                    with trio.fail_after(50):
                        await self.anthropic.start(nursery)
                        await self.openai.start(nursery)
                        self.door = await start_door(self._starter(nursery), self._config(), self._env())
                except BaseException as exc:
                    self._failed = exc
                    self._ready.set()
                    raise
                self._ready.set()
                await self._done.wait()
                for daemon in self._daemons:
                    await daemon.stop()
                nursery.cancel_scope.cancel()
        finally:
            for daemon in self._daemons:
                daemon.cleanup()

    def _starter(self, nursery: trio.Nursery) -> Any:
        async def start_daemon(config: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> Any:
            daemon = DaemonProcess(config, env)
            self._daemons.append(daemon)
            await daemon.start(nursery)
            if daemon.exited.is_set():
                raise RuntimeError(f"daemon exited at start:\n{daemon.output()}")
            return daemon

        return start_daemon

    def _config(self) -> dict[str, Any]:
        return {
            "providers": {"anthropic": {"base_url": self.anthropic.base_url}},
            # A Retry-After longer than this is not waited out: the 429 comes back at once.
            "retry": {"retry_after_cap_s": 1.0},
        }

    def _env(self) -> dict[str, str]:
        return {
            "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
            "OPENAI_API_KEY": OPENAI_KEY,
            "OPENAI_BASE_URL": self.openai.base_url + "/v1",
            "OPENAI_ORG_ID": "",
            "OPENAI_PROJECT_ID": "",
        }


def events_of(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    """The (event, data) pairs of a server-sent event stream (CRLF or LF, padded JSON)."""
    out = []
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        name, data = "message", b""
        for line in block.split(b"\n"):
            if line.startswith(b"event:"):
                name = line[6:].strip().decode()
            elif line.startswith(b"data:"):
                data += line[5:].strip()
        if data:
            out.append((name, json.loads(data)))
    return out
