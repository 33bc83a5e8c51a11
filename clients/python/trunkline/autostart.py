"""A daemon that starts itself: with `Client(autostart=True)` (or TRUNKLINE_AUTOSTART=1)
a client that finds no daemon starts one for the user's config, in the background.

The config says where that daemon answers (its runtime directory and control
endpoint), so every client of the same config finds the same daemon. Starting is
one critical section under an flock on `autostart.lock` in the runtime directory:
probe the control socket, else start `trunkline serve --exit-when-idle` detached
(a session of its own, no terminal, its output appended to `daemon.log` beside
the sockets), wait until it answers, and connect. Two clients starting at once
take turns on the lock, so the second finds the first one's daemon. The daemon
exits after `autostart.idle_exit_s` without clients, taking the same lock, so a
client never connects to a daemon on its way out: it waits, then starts the next.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import anyio

from .config.loader import AUTOSTART_LOCK, AUTOSTART_LOG, CONFIG_ENV, DEFAULTS_PATH, load_config
from .endpoints import host_of, port_of
from .errors import DaemonNotRunning
from .protocol import nng

#: `1` (or true, yes, on): clients start the daemon when none answers.
AUTOSTART_ENV = "TRUNKLINE_AUTOSTART"
#: How often a starting client looks whether the daemon answers yet (or the lock is free).
POLL_S = 0.02
#: The daemon's log is set aside as `daemon.log.1` when a start finds it larger than this.
LOG_ROTATE_BYTES = 4 * 1024 * 1024
#: What a failed start shows of the log's end.
LOG_TAIL_LINES = 8

T = TypeVar("T")


def wanted(option: bool | None) -> bool:
    """The client's `autostart` option, else TRUNKLINE_AUTOSTART."""
    if option is not None:
        return option
    return os.environ.get(AUTOSTART_ENV, "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True, slots=True)
class DaemonPlan:
    """The daemon of one config: the file it is started with (None: the built-in
    defaults alone), where its sockets live, and how long a client waits for it."""

    config_path: Path | None
    runtime_dir: Path
    control: str
    start_timeout_s: float

    @property
    def lock_path(self) -> Path:
        return self.runtime_dir / AUTOSTART_LOCK

    @property
    def log_path(self) -> Path:
        return self.runtime_dir / AUTOSTART_LOG

    @property
    def shown(self) -> str:
        return str(self.config_path) if self.config_path is not None else "the built-in defaults"

    def command(self) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "trunkline.cli",
            "serve",
            "--exit-when-idle",
            "--runtime-dir",
            str(self.runtime_dir),
        ]
        if self.config_path is not None:
            cmd += ["--config", str(self.config_path)]
        return cmd


def plan(config: str | Path | None, runtime_dir: Path | None) -> DaemonPlan:
    """The daemon a client with this config (None: TRUNKLINE_CONFIG, else the user's
    default file) and runtime directory (None: the config's) starts and reaches. A
    config that cannot be used raises `ConfigError`, naming the file and key."""
    path = config if config is not None else os.environ.get(CONFIG_ENV) or None
    loaded = load_config(path)
    source = Path(loaded.source).resolve()
    rd = (runtime_dir or loaded.resolved_runtime_dir()).expanduser().absolute()
    return DaemonPlan(
        config_path=None if source == DEFAULTS_PATH else source,
        runtime_dir=rd,
        control=loaded.endpoint("control", rd),
        start_timeout_s=loaded.autostart.start_timeout_s,
    )


def answers(control: str) -> bool:
    """Whether something listens at the control endpoint (a connection is accepted);
    the hello that follows says whether it is a daemon."""
    path = nng.ipc_path(control)
    try:
        if path is not None:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(str(path))
            return True
        host = host_of(control)
        if host in ("", "*", "0.0.0.0"):
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        with socket.create_connection((host, port_of(control)), timeout=1.0):
            return True
    except OSError:
        return False


async def start_and_connect(plan: DaemonPlan, connect: Callable[[], Awaitable[T]]) -> T:
    """Under the lock: start the daemon unless one answers, wait for it, then
    `connect()` (inside the lock, so an idle daemon cannot decide to exit before this
    client counts as connected). `connect` runs outside any cancel scope of ours: the
    connection it makes keeps a task group open past this call."""
    _prepare(plan.runtime_dir)
    deadline = anyio.current_time() + plan.start_timeout_s
    fd = os.open(plan.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            with anyio.fail_after(plan.start_timeout_s):
                await _lock(fd)
        except TimeoutError:
            raise DaemonNotRunning(
                f"another client held {plan.lock_path} for {plan.start_timeout_s:g}s (autostart.start_timeout_s) "
                f"while it started the daemon; see the daemon's log {plan.log_path}"
            ) from None
        if not answers(plan.control):
            try:
                with anyio.fail_at(deadline):
                    await _start(plan)
            except TimeoutError:
                raise DaemonNotRunning(
                    f"the trunkline daemon for {plan.shown} did not answer at {plan.control} within "
                    f"{plan.start_timeout_s:g}s (autostart.start_timeout_s); see its log {plan.log_path}"
                ) from None
        return await connect()
    finally:
        os.close(fd)  # the lock goes with it (and with the process, whatever happens)


def _prepare(runtime_dir: Path) -> None:
    """The runtime directory, private as the daemon makes it."""
    try:
        runtime_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise DaemonNotRunning(
            f"cannot start a trunkline daemon: cannot create {runtime_dir}: {exc.strerror}"
        ) from None
    if runtime_dir.stat().st_uid != os.getuid():
        raise DaemonNotRunning(f"cannot start a trunkline daemon: runtime dir {runtime_dir} belongs to another user")


async def _lock(fd: int) -> None:
    """The autostart lock, waited for without blocking the event loop."""
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            await anyio.sleep(POLL_S)


async def _start(plan: DaemonPlan) -> None:
    """Start the daemon detached and wait until its control socket accepts; one that
    exits first fails the start with the end of its log."""
    log_path = plan.log_path
    _rotate(log_path)
    with open(log_path, "ab") as log:
        offset = log.tell()
        header = f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} started by process {os.getpid()} (autostart)\n"
        log.write(header.encode())
        log.flush()
        env = {k: v for k, v in os.environ.items() if k != AUTOSTART_ENV}  # its own clients start nothing
        process = subprocess.Popen(
            plan.command(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # no terminal: the client's Ctrl-C and hangup are not the daemon's
            close_fds=True,
            cwd="/",  # holds no directory of the client's
            env=env,
        )
    try:
        while not answers(plan.control):
            status = process.poll()
            if status is not None:
                raise DaemonNotRunning(
                    f"the trunkline daemon for {plan.shown} exited with status {status} before answering; "
                    f"its log {log_path} ends:\n{_tail(log_path, offset)}"
                )
            await anyio.sleep(POLL_S)
    finally:
        # Reap it whenever it exits, so it never lingers as a zombie of a long-lived client.
        if process.returncode is None:
            threading.Thread(target=process.wait, name="trunkline daemon reaper", daemon=True).start()


def _rotate(log_path: Path) -> None:
    with contextlib.suppress(OSError):
        if log_path.stat().st_size > LOG_ROTATE_BYTES:
            log_path.replace(log_path.with_name(log_path.name + ".1"))


def _tail(log_path: Path, offset: int) -> str:
    """The last lines this start wrote to the log."""
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return "  (the log cannot be read)"
    return "\n".join(f"  {line}" for line in lines[-LOG_TAIL_LINES:])


__all__ = ["AUTOSTART_ENV", "CONFIG_ENV", "DaemonPlan", "answers", "plan", "start_and_connect", "wanted"]
