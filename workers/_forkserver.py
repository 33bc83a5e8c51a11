"""The fork server (`python -m trunkline.workers --fork-server`): one process that has
imported everything a worker needs and forks a worker when the supervisor asks.

A spawned worker spends most of its start importing trio, httpx, msgspec and its
adapter, and building its TLS context; a forked one finds them done, and shares
their pages with the fork server and its siblings. Forking a Python process is safe
only in a plain state, so this process is kept plain: it never starts an event
loop or a thread (it checks it has one thread before each fork), holds no socket
but its datagram pair to the supervisor and no file open (the link descriptors it
is handed pass through it and are closed once forked), and never reads a provider's
key (its environment has none: each worker's own comes in its fork request).

Each worker is forked twice: the first child forks the worker and exits at once,
and the supervisor, a child subreaper, adopts the orphan. The worker is then the
supervisor's child exactly as a spawned one is (it waits for it, gets its status,
signals it), in a session of its own, its signal handlers and mask those of a
new interpreter, its descriptors 0-2 and its link only, its environment replaced
by the one the request carries. Then it runs the worker's `main` as a spawned one
does, and exits through the interpreter as one does.
"""

from __future__ import annotations

import array
import contextlib
import gc
import os
import select
import signal
import socket
import sys
import traceback

from ..protocol import forkserver as wire
from ._proctitle import set_cmdline, set_comm, worker_args

#: How long a forked worker waits for the first child to exit (microseconds, in practice).
ADOPTION_WAIT_MS = 5000
#: What the fork server's own command line says once it has started (`pgrep -f
#: trunkline.workers` finds the workers, not it).
TITLE = b"trunkline fork server"


def _handlers() -> dict[int, object]:
    """The signal handlers this interpreter started with (what a spawned worker has)."""
    unchangeable = (signal.SIGKILL, signal.SIGSTOP)
    return {sig: signal.getsignal(sig) for sig in signal.valid_signals() if sig not in unchangeable}


def _preload(kinds: list[str]) -> None:
    """Everything a worker of these provider types imports or builds before it serves,
    and what its first request would otherwise import late (a worker of another type
    imports its adapter itself)."""
    import encodings.idna  # noqa: F401 - socket.getaddrinfo encodes a host name with it at the first connection
    import sqlite3  # noqa: F401 - the tool-id map

    import httpcore._backends.trio  # noqa: F401 - httpcore imports its trio backend at the first request

    from . import _runtime, _tls

    for kind in kinds:
        if kind in _runtime.ADAPTERS:
            _runtime.adapter_class(kind)
    _tls.client_context()


def run() -> bool:
    """Serve fork requests on the supervisor's socket (its descriptor in
    TRUNKLINE_FORK_SERVER). Returns False when the supervisor has gone (the fork server
    exits); True in a worker it forked, ready for the worker's `main`."""
    sock = socket.socket(fileno=int(os.environ.pop("TRUNKLINE_FORK_SERVER")))
    set_cmdline([TITLE, b""])  # the padding after the title, where `ps` shows nothing
    set_comm("tl-forkserver")
    supervisor = os.getppid()
    startup_handlers = _handlers()
    # No collection, not even one after the imports: what it frees leaves holes in the
    # pages the workers share, and their first allocations fill them, copying each page
    # (a final collection freed ~3,000 objects and cost the five workers 2.3 MiB of PSS,
    # and the start 15-40 ms). The imports' few cycles stay, frozen before each fork.
    gc.disable()
    _preload(os.environ.pop("TRUNKLINE_FORK_SERVER_TYPES", "").split(","))
    _answer(sock, wire.Ready(pid=os.getpid()))
    while True:
        try:
            data, ancdata, _, _ = sock.recvmsg(wire.MAX_MESSAGE, socket.CMSG_SPACE(4 * 4))
        except ConnectionResetError:
            return False  # the supervisor has gone, leaving an answer unread
        fds = _received_fds(ancdata)
        if not data:
            return False  # the supervisor has gone
        try:
            request = wire.decode_request(data)
        except Exception as exc:  # noqa: BLE001 - an answer, never the fork server's end
            _close(fds)
            _answer(sock, wire.Refused(reason=f"unreadable request: {exc}"))
            continue
        refused = _why_not(fds)
        if refused:
            _close(fds)
            _answer(sock, wire.Refused(reason=refused))
            continue
        if _fork(request, fds[0], sock, supervisor, startup_handlers):
            return True


def _answer(sock: socket.socket, message: wire.Ready | wire.Forked | wire.Refused) -> None:
    """Send `message`; a supervisor that has gone (a `serve` that failed to start) is
    not an error: the next receive reads the end of the socket, and the loop ends."""
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        sock.send(wire.encode(message))


def _received_fds(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    fds = array.array("i")
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return list(fds)


def _close(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _why_not(fds: list[int]) -> str:
    if len(fds) != 1:
        return f"a fork request carries one descriptor (the link), not {len(fds)}"
    count = threads()
    if count != 1:
        # A thread holding a lock at the fork would leave it held forever in the child.
        return f"the fork server has {count} threads; it forks only with one"
    return ""


def _fork(request: wire.Fork, link_fd: int, sock: socket.socket, supervisor: int, handlers: dict[int, object]) -> bool:
    """Fork the worker of `request`: True in the worker, False in the fork server
    (which has answered the supervisor)."""
    sys.stdout.flush()
    sys.stderr.flush()
    gc.freeze()  # the imported objects move out of the collector's reach: no child writes their headers
    read_pid, write_pid = os.pipe()
    try:
        first = os.fork()
    except OSError as exc:
        os.close(read_pid)
        os.close(write_pid)
        os.close(link_fd)
        _answer(sock, wire.Refused(reason=f"fork failed: {exc}"))
        return False
    if first == 0:
        try:
            os.close(read_pid)
            worker = os.fork()
            if worker == 0:
                os.close(write_pid)
                _become_worker(request, link_fd, sock, supervisor, handlers)
                return True
            os.write(write_pid, worker.to_bytes(8, "little"))
        except BaseException:  # noqa: BLE001 - this process only forks and leaves
            traceback.print_exc()
            os._exit(1)
        os._exit(0)  # the worker is orphaned now, and adopted by the supervisor
    os.close(write_pid)
    os.close(link_fd)
    raw = b""
    while chunk := os.read(read_pid, 8 - len(raw)):
        raw += chunk
    os.close(read_pid)
    # Answered before the first child is reaped (the worker's adoption is then a matter
    # of microseconds, which `ForkedProcess` allows for): one wake-up less per start.
    if len(raw) != 8:
        _answer(sock, wire.Refused(reason="the worker could not be forked"))
    else:
        _answer(sock, wire.Forked(pid=int.from_bytes(raw, "little")))
    os.waitpid(first, 0)
    return False


def _become_worker(
    request: wire.Fork, link_fd: int, sock: socket.socket, supervisor: int, handlers: dict[int, object]
) -> None:
    """Make this forked process what a spawned worker is at its start. Any failure
    here ends the process (it must never return to the fork server's loop)."""
    try:
        os.setsid()  # Ctrl-C and a service manager's signals reach the supervisor only
        server_fd = sock.detach()
        if link_fd != wire.LINK_FD:
            os.dup2(link_fd, wire.LINK_FD)
        os.closerange(wire.LINK_FD + 1, max(link_fd, server_fd, os.sysconf("SC_OPEN_MAX")))
        for sig, handler in handlers.items():
            if handler is not None and signal.getsignal(sig) != handler:
                signal.signal(sig, handler)  # type: ignore[arg-type]  # the handler getsignal gave
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        os.environ.clear()
        os.environ.update(request.env)
        sys.argv = [sys.argv[0], request.name]
        set_comm(f"tl-{request.name}")
        set_cmdline(worker_args(request.name))
        _wait_adopted(supervisor)
        gc.enable()
    except BaseException:  # noqa: BLE001 - whatever it is, this process is no fork server
        traceback.print_exc()
        os._exit(1)


def _wait_adopted(supervisor: int) -> None:
    """Wait for the first child to exit, so the worker's parent is the supervisor when
    the worker checks it (as a spawned worker does at its start)."""
    parent = os.getppid()
    if parent == supervisor:
        return
    try:
        pidfd = os.pidfd_open(parent)
    except ProcessLookupError:
        return  # gone already
    try:
        if os.getppid() == parent:  # still our parent, so the descriptor is that process
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            poller.poll(ADOPTION_WAIT_MS)
    finally:
        os.close(pidfd)
