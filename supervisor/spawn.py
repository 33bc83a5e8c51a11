"""Starting and stopping worker processes."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterable
from typing import Protocol

import msgspec
import trio

from ..config.loader import WorkerSettings
from .launch import worker_command, worker_environment


class WorkerProcess(Protocol):
    """A worker process as the supervisor holds it: spawned (`trio.Process`) or forked by
    the fork server (`forkserver.ForkedProcess`), a child of the supervisor either way."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...


def environment(settings: WorkerSettings, other_keys: Iterable[str] = ()) -> dict[str, str]:
    """A worker's whole environment: its settings in TRUNKLINE_WORKER, its API key where it
    already is (the inherited environment), never on a command line; `other_keys` (other
    providers' key variables) and anything named like a credential are left out."""
    env = worker_environment(os.environ, settings.provider.key_env_names(), other_keys)
    env["TRUNKLINE_WORKER"] = msgspec.json.encode(settings).decode()
    return env


async def start(
    settings: WorkerSettings, pass_fds: tuple[int, ...] = (), other_keys: Iterable[str] = ()
) -> trio.Process:
    """A new worker process, spawned, with its `environment`. `pass_fds`: the descriptors
    it inherits (its end of the link)."""
    env = environment(settings, other_keys)
    # A session of its own: signals meant for the daemon's process group (Ctrl-C in
    # its terminal, a service manager's TERM) reach the supervisor only, which then
    # drains and stops its workers in order.
    return await trio.lowlevel.open_process(
        worker_command(settings.name), env=env, stdin=subprocess.DEVNULL, start_new_session=True, pass_fds=pass_fds
    )


async def stop(proc: WorkerProcess, grace_s: float) -> None:
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
