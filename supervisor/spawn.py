"""Starting and stopping worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import msgspec
import trio

from ..config.loader import WorkerSettings


def worker_command(name: str = "") -> list[str]:
    # The provider's name is on the command line only so `ps` says which worker is which
    # (the worker reads its settings from the environment).
    return [sys.executable, "-m", "trunkline.workers", *([name] if name else [])]


async def start(settings: WorkerSettings, pass_fds: tuple[int, ...] = ()) -> trio.Process:
    """A new worker process; its settings travel in the environment, its API key
    stays where it already is (the inherited environment), never on a command line.
    `pass_fds`: the descriptors it inherits (its end of the link)."""
    env = dict(os.environ)
    env["TRUNKLINE_WORKER"] = msgspec.json.encode(settings).decode()
    # A session of its own: signals meant for the daemon's process group (Ctrl-C in
    # its terminal, a service manager's TERM) reach the supervisor only, which then
    # drains and stops its workers in order.
    return await trio.lowlevel.open_process(worker_command(settings.name), env=env, stdin=subprocess.DEVNULL,
                                            start_new_session=True, pass_fds=pass_fds)


async def stop(proc: trio.Process, grace_s: float) -> None:
    """Wait `grace_s` for a worker asked to shut down, then TERM, then KILL."""
    if grace_s > 0:
        with trio.move_on_after(grace_s):
            await proc.wait()
            return
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        with trio.move_on_after(1.0):
            await proc.wait()
            return
    if proc.returncode is None:
        proc.kill()
        await proc.wait()
