"""When a daemon started to exit when idle decides to go (on trio's mock clock): not
while a client is connected or one is starting it, and an hour of `idle_exit_s`
counted from the last client to leave."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import trio

from trunkline.config.loader import load_config
from trunkline.supervisor.daemon import Daemon

IDLE_S = 60.0


def _daemon(tmp_path: Path, connections: set[int]) -> Daemon:
    config = load_config(
        None,
        use_user_default=False,
        overrides={"state_dir": str(tmp_path / "state"), "autostart": {"idle_exit_s": IDLE_S}},
    )
    runtime_dir = tmp_path / "run"
    runtime_dir.mkdir()
    daemon = Daemon(config, runtime_dir, exit_when_idle=True)
    # The control socket's connections as its gate counts them; no socket is bound here.
    daemon.rep = SimpleNamespace(gate=SimpleNamespace(open=connections))  # type: ignore[assignment]  # the gate alone
    return daemon


async def test_idle_exit_waits_for_the_idle_time_and_never_while_a_client_is_connected(autojump_clock, tmp_path):
    connections = {7}
    daemon = _daemon(tmp_path, connections)
    with trio.move_on_after(3600) as kept:
        await daemon._idle()
    assert kept.cancelled_caught  # an hour with a client connected: still serving
    connections.clear()
    left = trio.current_time()
    await daemon._idle()
    assert IDLE_S <= trio.current_time() - left <= IDLE_S + 1


async def test_a_client_that_came_and_went_between_two_looks_restarts_the_idle_time(autojump_clock, tmp_path):
    daemon = _daemon(tmp_path, set())
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(daemon._idle)
        await trio.sleep(IDLE_S - 10)
        daemon._connection_gone(9)  # connected and gone again since the last look
    assert IDLE_S - 10 + IDLE_S <= trio.current_time() - start <= 2 * IDLE_S


async def test_a_client_holding_the_autostart_lock_keeps_the_daemon(autojump_clock, tmp_path):
    daemon = _daemon(tmp_path, set())
    fd = os.open(tmp_path / "run" / "autostart.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a client between its probe and its hello
        with trio.move_on_after(10 * IDLE_S) as kept:
            await daemon._idle()
        assert kept.cancelled_caught
    finally:
        os.close(fd)
    await daemon._idle()
    # From here the daemon holds the lock to its end: a client waits for it to go.
    other = os.open(tmp_path / "run" / "autostart.lock", os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(other)
