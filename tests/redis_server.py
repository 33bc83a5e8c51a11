"""A real `redis-server` per test, on a free port, with no persistence unless asked.

`redis_server` (the fixture, in tests/conftest.py) starts one and stops it at teardown
whatever happened; `RedisServer.kill()` and `start()` again stop it mid-test and bring
it back on the same port (the shared store's outage tests). With `data_dir` it keeps
its data as a production Redis does (an append-only file synced before each reply), so
a restart after a kill has everything it acknowledged. `make test` installs
redis-server when it is missing (Debian's package).
"""

from __future__ import annotations

import shutil
import socket
import subprocess

import trio

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
START_TIMEOUT_S = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class RedisServer:
    def __init__(
        self,
        port: int | None = None,
        *,
        password: str | None = None,
        tls: tuple[str, str] | None = None,
        data_dir: str | None = None,
    ) -> None:
        self.port = port or free_port()
        #: Where it keeps its append-only file (None: it keeps nothing, a restart is empty).
        self.data_dir = data_dir
        self.password = password
        #: (certificate chain file, key file): the server speaks TLS only (rediss://).
        self.tls = tls
        self.proc: trio.Process | None = None
        self.lines: list[str] = []

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        if self.tls:  # by name: the test certificate is issued to localhost
            return f"rediss://{auth}localhost:{self.port}/0"
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def command(self) -> list[str]:
        port = ["--port", "0", "--tls-port", str(self.port)] if self.tls else ["--port", str(self.port)]
        cmd = [REDIS_SERVER, *port, "--bind", "127.0.0.1", "--save", ""]
        if self.data_dir:
            cmd += ["--dir", self.data_dir, "--appendonly", "yes", "--appendfsync", "always"]
        else:
            cmd += ["--appendonly", "no"]
        if self.tls:
            cert, key = self.tls
            cmd += ["--tls-cert-file", cert, "--tls-key-file", key, "--tls-auth-clients", "no"]
        if self.password:
            cmd += ["--requirepass", self.password]
        return cmd

    async def start(self, nursery: trio.Nursery) -> RedisServer:
        """Start it and return once it accepts connections (it says so on stdout)."""
        ready = trio.Event()
        self.lines = []  # a restart's readiness is read from its own lines
        proc = self.proc = await trio.lowlevel.open_process(
            self.command(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )

        async def read() -> None:
            assert proc.stdout is not None
            buf = b""
            async for chunk in proc.stdout:
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    self.lines.append(line.decode(errors="replace"))
                    if b"Ready to accept connections" in line:
                        ready.set()
            ready.set()  # it exited: the check below says so

        nursery.start_soon(read)
        with trio.fail_after(START_TIMEOUT_S):
            await ready.wait()
        if proc.returncode is not None or not any("Ready to accept" in line for line in self.lines):
            raise RuntimeError("redis-server did not start:\n" + "\n".join(self.lines[-20:]))
        return self

    async def kill(self) -> None:
        """SIGKILL, as a crash or a lost machine would, and wait for it to be gone."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            with trio.fail_after(10):
                await self.proc.wait()

    def stop_now(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
