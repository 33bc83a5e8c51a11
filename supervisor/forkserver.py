"""The supervisor's side of the fork server (`supervision.worker_start: forkserver`).

The fork server is a process of the worker's code (`python -m trunkline.workers
--fork-server`, started here, never imported: the supervisor loads no worker
code) that has imported everything a worker needs and forks workers on request,
so a worker starts in milliseconds instead of importing for a quarter of a
second, and shares the imported pages with its siblings.

The supervisor still owns every worker: it is a child subreaper, so a worker the
fork server forks (through a first child that exits at once) is adopted as the
supervisor's own child, and `ForkedProcess` waits for it, reads its exit status
and signals it through a pidfd, as `trio.Process` does for a spawned one. The
fork server is restarted when it dies, with a growing pause; until it is back,
and whenever it cannot answer, workers are spawned as before.
"""

from __future__ import annotations

import array
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Iterable, Mapping
from typing import Literal

import trio

from ..protocol import forkserver as wire
from .launch import Launched, become_subreaper, launch, worker_environment

log = logging.getLogger("trunkline.supervisor")

#: How long the fork server may take to import everything and say it is ready.
READY_TIMEOUT_S = 60.0
#: How long one fork may take before the fork server counts as hung (it is killed).
FORK_TIMEOUT_S = 5.0
#: Pauses before restarting a fork server that died: doubling from the first to the last;
#: back to the first once it has served this long.
RESTART_PAUSE_S = (0.1, 30.0)
STABLE_S = 30.0

State = Literal["off", "starting", "ready", "down"]


class ForkedProcess:
    """A child of this process (a worker the fork server forked and this process adopted,
    or the fork server itself) waited for, reaped and signalled through a pidfd (no race
    with a reused pid), as `trio.Process` is.

    The fork server answers as soon as the worker exists, while the first child that
    forked it may still be exiting: a worker that dies within those microseconds is
    not yet ours to reap (ECHILD), and is waited for again until it is adopted."""

    #: How long a worker may stay unadopted before its status counts as lost.
    ADOPTION_S = 5.0

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._pidfd: int | None = os.pidfd_open(pid)
        self._code: int | None = None
        self._unadopted_since: float | None = None
        self._wait_lock = trio.Lock()

    @property
    def returncode(self) -> int | None:
        if self._code is None and self._pidfd is not None:
            self._reap(os.WNOHANG)
        return self._code

    def _reap(self, flags: int) -> None:
        assert self._pidfd is not None
        try:
            result = os.waitid(os.P_PIDFD, self._pidfd, os.WEXITED | flags)
        except ChildProcessError:
            now = trio.current_time()
            if self._unadopted_since is None:
                self._unadopted_since = now
            if now - self._unadopted_since < self.ADOPTION_S:
                return  # exited before its first parent did: ours in a moment
            result = None
            self._code = 0  # reaped elsewhere: its status is lost (as subprocess says)
        else:
            # Ours now: `wait` goes back to sleeping on the pidfd. (Left set, it went on
            # polling every millisecond for the worker's whole life: a quarter of a core
            # with the daemon idle, and every event relayed paid for the wake-ups.)
            self._unadopted_since = None
        if result is not None:
            code = result.si_status
            self._code = code if result.si_code == os.CLD_EXITED else -code
        if self._code is not None:
            self._close()

    def _close(self) -> None:
        if self._pidfd is not None:
            trio.lowlevel.notify_closing(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

    async def wait(self) -> int:
        async with self._wait_lock:
            while self.returncode is None:
                assert self._pidfd is not None
                if self._unadopted_since is not None:
                    await trio.sleep(0.001)  # it has exited; its adoption is what we wait for
                    continue
                with contextlib.suppress(trio.ClosedResourceError):
                    await trio.lowlevel.wait_readable(self._pidfd)  # readable once it has exited
            assert self._code is not None
            return self._code

    def send_signal(self, sig: int) -> None:
        if self.returncode is None and self._pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkServer:
    """Keeps the fork server running while the configuration wants it, and asks it for
    workers. `base_env` is the environment its workers' are made from; it gets it
    without any credential. `providers` are name -> type (its command line leaves room
    for the longest, which its workers write theirs over)."""

    def __init__(
        self,
        base_env: Mapping[str, str],
        key_names: Iterable[str],
        providers: Mapping[str, str],
        early: Launched | None = None,
    ) -> None:
        self.env = worker_environment(base_env, (), key_names)
        #: The one `serve` started before the supervisor's code was imported, to adopt.
        self._early = early
        self.providers = dict(providers)
        self.state: State = "off"
        self.pid: int | None = None
        self._wanted = False
        self._changed = trio.Event()
        self._proc: ForkedProcess | None = None
        self._sock: trio.socket.SocketType | None = None
        self._lock = trio.Lock()
        #: Set once the first fork server is ready or has failed: until then a worker
        #: waits for it (the daemon's cold start) rather than being spawned.
        self._first_settled = trio.Event()
        self._settled = trio.Event()
        self.forks = 0

    def want(self, on: bool, why: str = "supervision.worker_start is spawn") -> None:
        """Run the fork server or not (`supervision.worker_start`, at start and on reload;
        off for the shutdown)."""
        if on != self._wanted:
            self._wanted = on
            self._changed.set()
            if not on:
                self._first_settled.set()
                self._end(why)

    @property
    def wanted(self) -> bool:
        return self._wanted

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        if not self.wanted:
            self._first_settled.set()  # turned on by a reload: nobody waits for its first start
        task_status.started()
        pause = RESTART_PAUSE_S[0]
        try:
            while True:
                while not self.wanted:
                    self._changed = trio.Event()
                    await self._changed.wait()
                if not become_subreaper():
                    log.warning("fork server: this system cannot adopt forked workers (no child subreaper); spawning")
                    self._wanted = False
                    self._first_settled.set()
                    continue
                ready_at = await self._run_one()
                self._first_settled.set()
                if self.wanted:  # it died (else a reload or the shutdown stopped it)
                    if ready_at is not None and trio.current_time() - ready_at >= STABLE_S:
                        pause = RESTART_PAUSE_S[0]
                    log.warning("fork server: restarting in %gs; workers are spawned until it is back", pause)
                    with trio.move_on_after(pause):
                        self._changed = trio.Event()
                        await self._changed.wait()  # a reload that turns it off ends the pause
                    pause = min(pause * 2, RESTART_PAUSE_S[1])
        finally:
            self._end("the daemon stops")

    async def _run_one(self) -> float | None:
        """One fork server process, until it exits; when it became ready, if it did."""
        self.state = "starting"
        self._settled = trio.Event()
        try:
            launched, self._early = self._early or launch(self.env, self.providers), None
            proc = ForkedProcess(launched.popen.pid)
        except OSError as exc:
            log.error("fork server: cannot start: %s", exc)
            self.state = "down"
            self._settled.set()
            return None
        self._proc, self.pid = proc, proc.pid
        self._sock = trio.socket.from_stdlib_socket(launched.sock)
        ready_at: float | None = None
        async with trio.open_nursery() as nursery:

            async def await_ready() -> None:
                nonlocal ready_at
                if await self._await_ready(proc.pid):
                    ready_at = trio.current_time()
                self._settled.set()
                self._first_settled.set()

            nursery.start_soon(await_ready)
            code = await proc.wait()
            launched.popen.returncode = code  # reaped here: subprocess must never wait for it again
            nursery.cancel_scope.cancel()
        self._settled.set()
        self._end("")
        how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
        if self._wanted:
            log.warning("fork server: process %d %s", proc.pid, how)
        return ready_at

    async def _await_ready(self, pid: int) -> bool:
        sock = self._sock
        if sock is None:
            return False  # stopped (the shutdown, a reload) before this task ran
        started = trio.current_time()
        with trio.move_on_after(READY_TIMEOUT_S):
            try:
                data = await sock.recv(wire.MAX_MESSAGE)
                reply = wire.decode_reply(data) if data else None
            except (OSError, ValueError, trio.ClosedResourceError):
                # ClosedResourceError: stopped while it was still starting (`_end` closed
                # its socket under this wait).
                reply = None
            if isinstance(reply, wire.Ready):
                self.state = "ready"
                log.info("fork server: ready (pid %d, %.0f ms)", pid, (trio.current_time() - started) * 1000)
                return True
        self._end("it did not say it was ready")
        return False

    def _end(self, why: str) -> None:
        """Stop the current fork server: it sees its socket close and exits; killed too,
        as one that stopped answering may never read it."""
        if self.state in ("starting", "ready") and why:
            log.info("fork server: stopping (%s)", why)
        self.state = "down" if self._wanted else "off"
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None and self._proc.returncode is None:
            self._proc.kill()
        self.pid = None

    async def start_worker(self, name: str, env: dict[str, str], link_end: socket.socket) -> ForkedProcess | None:
        """A worker forked with `env` (its settings say its link is `fd:3`) and `link_end`
        as its link; None when the fork server cannot make one now (spawn it instead)."""
        if not self._first_settled.is_set():
            await self._first_settled.wait()  # the daemon's start: it is about to be ready
        async with self._lock:
            sock = self._sock
            if self.state != "ready" or sock is None:
                return None
            request = wire.encode(wire.Fork(name=name, env=env))
            fds = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [link_end.fileno()]))]
            try:
                with trio.fail_after(FORK_TIMEOUT_S):
                    await sock.sendmsg([request], fds)
                    data = await sock.recv(wire.MAX_MESSAGE)
                reply = wire.decode_reply(data) if data else None
            except trio.TooSlowError:
                self._end(f"no answer to a fork within {FORK_TIMEOUT_S:g}s")
                return None
            except (OSError, ValueError, trio.ClosedResourceError) as exc:
                self._end(f"its socket failed: {exc!r}")
                return None
            except BaseException:
                self._end("a fork was interrupted")  # its answer would be read as the next one's
                raise
            if isinstance(reply, wire.Forked):
                self.forks += 1
                try:
                    return ForkedProcess(reply.pid)
                except OSError as exc:
                    log.error("fork server: worker %d cannot be watched: %s", reply.pid, exc)
                    with contextlib.suppress(OSError):
                        os.kill(reply.pid, signal.SIGKILL)
                    return None
            if isinstance(reply, wire.Refused):
                log.warning("fork server: refused to fork a %s worker: %s", name, reply.reason)
            elif reply is None:
                self._end("its socket closed")
            return None
