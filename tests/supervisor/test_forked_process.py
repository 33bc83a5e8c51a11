"""A forked worker as the supervisor waits for it (`ForkedProcess`)."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
import trio

from trunkline.supervisor import forkserver
from trunkline.supervisor.forkserver import ForkedProcess


async def test_a_worker_adopted_after_a_moment_is_waited_for_without_polling(
    monkeypatch: pytest.MonkeyPatch, mock_clock: trio.testing.MockClock
) -> None:
    """The fork server answers before the worker's first parent has exited, so the first
    look may not find the worker ours yet (ECHILD). Once it is, waiting for its exit must
    sleep on its pidfd: polling instead cost a quarter of a core for the worker's life."""
    child = subprocess.Popen(["sleep", "600"])
    real_waitid = os.waitid
    calls = 0

    def waitid(idtype: int, ident: int, options: int) -> os.waitid_result | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ChildProcessError("not adopted yet")
        return real_waitid(idtype, ident, options)

    monkeypatch.setattr(forkserver.os, "waitid", waitid)
    process = ForkedProcess(child.pid)
    try:
        assert process.returncode is None  # the ECHILD look
        assert process.returncode is None  # adopted: alive, ours
        done = trio.Event()
        codes: list[int] = []

        async def wait() -> None:
            codes.append(await process.wait())
            done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            # A hundred moments of virtual time, each long enough for a poll to look
            # again: waiting on the pidfd looks no more.
            for _ in range(100):
                await trio.testing.wait_all_tasks_blocked()
                mock_clock.jump(0.01)
            await trio.testing.wait_all_tasks_blocked()
            assert calls < 10
            os.kill(child.pid, signal.SIGKILL)
            mock_clock.rate = 1.0  # from here the deadline runs in real time
            with trio.fail_after(30):
                await done.wait()
        assert codes == [-signal.SIGKILL]
    finally:
        if child.poll() is None and process.returncode is None:
            child.kill()
