"""The HTTP front door's processes: started, watched and restarted like workers.

The daemon binds the listening socket itself (so a port already taken fails the
daemon's start, and a front-door process that restarts never leaves a moment in
which connections are refused) and starts `http.processes` processes that serve
it (`python -m trunkline.frontdoor`). Each is a client of the daemon over the
public protocol; the daemon knows it only as a child to keep alive. Each gets
one end of a socket pair: it says `ready` on it once it serves, and sees the
daemon's end of file there if the daemon dies. A process that exits is started
again, within the same restart intensity as a worker; past it the front door is
`unavailable` for `supervision.unavailable_retry_s`, then tried again.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import subprocess
import sys

import msgspec
import trio

from ..config.loader import ClientKeyConfig, FrontDoorSettings, HttpConfig, Supervision
from ..protocol.messages import WorkerStatus
from .launch import worker_environment
from .slot import State
from .tree import Intensity

log = logging.getLogger("trunkline.supervisor")

#: How the front door appears among the workers in `status` and the metrics.
NAME = "http"


def new_secret() -> str:
    """The secret the front door's processes say hello with, new at each daemon start: a
    connection that gives it may name the client key of each request (`Submit.client_key`)."""
    return secrets.token_urlsafe(32)


def bind(http: HttpConfig) -> socket.socket:
    """The listening socket, bound and listening (OSError: the address is taken)."""
    host, port = http.address()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
        sock.set_inheritable(True)
    except BaseException:
        sock.close()
        raise
    return sock


class FrontDoorProcess:
    """One process serving the front door's socket, kept alive."""

    def __init__(self, index: int, door: FrontDoor) -> None:
        self.index = index
        self.door = door
        self.state: State = "starting"
        self.pid: int | None = None
        self.restarts = 0
        self.last_error: str | None = None
        self.intensity = Intensity(door.supervision.max_restarts, door.supervision.restart_window_s)
        self._proc: trio.Process | None = None
        self._stopping = trio.Event()

    @property
    def name(self) -> str:
        return NAME if self.index == 0 else f"{NAME}-{self.index + 1}"

    def status(self) -> WorkerStatus:
        return WorkerStatus(
            provider=self.name,
            provider_type=NAME,
            state=self.state,
            pid=self.pid,
            restarts=self.restarts,
            last_error=self.last_error,
        )

    async def run(self) -> None:
        try:
            while not self._stopping.is_set():
                code = await self._run_one()
                if self._stopping.is_set():
                    break
                how = (
                    "could not start"
                    if code is None
                    else (f"killed by signal {-code}" if code < 0 else f"exited with status {code}")
                )
                self.last_error = self.last_error if code is None else f"front door process {self.pid} {how}"
                log.warning("http: %s", self.last_error)
                self.pid = None
                if self.intensity.allow(trio.current_time()):
                    self.restarts += 1
                    self.state = "restarting"
                    await trio.sleep(self.door.supervision.restart_backoff_s)
                    continue
                self.state = "unavailable"
                log.error(
                    "http: %d restarts within %gs; marked unavailable",
                    self.intensity.max_restarts,
                    self.intensity.window_s,
                )
                await trio.sleep(self.door.supervision.unavailable_retry_s)
                self.intensity.reset()
            self.state = "stopped"
        finally:
            if self._proc is not None and self._proc.returncode is None:
                self._proc.kill()

    async def _run_one(self) -> int | None:
        ours, theirs = socket.socketpair()
        listen_fd = self.door.sock.fileno()
        settings = FrontDoorSettings(
            index=self.index,
            listen_fd=listen_fd,
            link_fd=theirs.fileno(),
            control=self.door.control,
            http=self.door.http,
            log_level=self.door.log_level,
            clients=self.door.clients,
            door_secret=self.door.secret,
        )
        # No provider's key (it calls no provider), but the daemon's token (a network control
        # endpoint asks for it) and the variables holding its own keys and the named ones.
        own = [
            *self.door.http.keys_env,
            "TRUNKLINE_TOKEN",
            *(c.key_env for c in self.door.clients.values() if c.key_env),
        ]
        env = worker_environment(os.environ, own, self.door.provider_keys)
        env["TRUNKLINE_FRONTDOOR"] = msgspec.json.encode(settings).decode()
        try:
            self._proc = await trio.lowlevel.open_process(
                [sys.executable, "-m", "trunkline.frontdoor", str(self.index)],
                env=env,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                pass_fds=(listen_fd, theirs.fileno()),
            )
        except OSError as exc:
            self.last_error = f"cannot start the front door: {exc}"
            ours.close()
            return None
        finally:
            theirs.close()
        self.pid = self._proc.pid
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._await_ready, ours)
            code = await self._proc.wait()
            nursery.cancel_scope.cancel()
        ours.close()
        return code

    async def _await_ready(self, link: socket.socket) -> None:
        sock = trio.socket.from_stdlib_socket(link)
        if await sock.recv(64):
            self.state = "running"
            log.info("http: process %d serving (pid %s)", self.index, self.pid)

    async def stop(self, grace_s: float) -> None:
        self._stopping.set()
        proc = self._proc
        if proc is not None and proc.returncode is None:
            proc.terminate()  # hypercorn lets the requests in flight finish
            with trio.move_on_after(grace_s):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
        self.state = "stopped"


class FrontDoor:
    """The front door's processes and the socket they share."""

    def __init__(
        self,
        http: HttpConfig,
        *,
        control: str,
        supervision: Supervision,
        log_level: str,
        provider_keys: frozenset[str],
        clients: dict[str, ClientKeyConfig] | None = None,
        secret: str = "",
    ) -> None:
        self.http = http
        self.clients = clients or {}
        #: Handed to its processes in their settings (the environment, never a command line or a log).
        self.secret = secret
        self.control = control
        self.supervision = supervision
        self.log_level = log_level
        self.provider_keys = provider_keys
        self.sock = bind(http)
        self.processes = [FrontDoorProcess(i, self) for i in range(http.processes)]

    @property
    def url(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def status(self) -> list[WorkerStatus]:
        return [p.status() for p in self.processes]

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            for process in self.processes:
                nursery.start_soon(process.run)

    async def stop(self, grace_s: float) -> None:
        async with trio.open_nursery() as nursery:
            for process in self.processes:
                nursery.start_soon(process.stop, grace_s)

    def close(self) -> None:
        self.sock.close()
