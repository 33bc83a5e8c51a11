"""Starting a fork server, as early as `serve` can: before the supervisor's code (and
trio) is imported, so the fork server imports the workers' code while the supervisor
imports its own. What a worker's environment and command line are belong here for
the same reason: this module imports nothing the supervisor does not need at once."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..protocol import forkserver as wire

if TYPE_CHECKING:
    from ..config.loader import Config

_PR_SET_CHILD_SUBREAPER = 36

#: Names that look like credentials: no worker inherits them, except its own key.
_SECRET_NAME = re.compile(r"(^|_)(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)(_|$)", re.IGNORECASE)


def worker_command(name: str = "") -> list[str]:
    # The provider's name is on the command line only so `ps` says which worker is which
    # (the worker reads its settings from the environment).
    return [sys.executable, "-m", "trunkline.workers", *([name] if name else [])]


def worker_environment(
    base: Mapping[str, str], own_keys: Iterable[str] = (), other_keys: Iterable[str] = ()
) -> dict[str, str]:
    """What a worker inherits: everything but credentials, and of those only its own
    provider's key. A worker that is tricked into revealing its environment then
    holds nothing that belongs to another provider, and never the daemon's token."""
    own = set(own_keys)
    drop = set(other_keys) | {"TRUNKLINE_TOKEN"}
    return {
        name: value
        for name, value in base.items()
        if name in own or (name not in drop and not _SECRET_NAME.search(name))
    }


@dataclass
class Launched:
    """A fork server process just started: its `Popen` (kept so subprocess never reaps it:
    `ForkedProcess` does) and the supervisor's end of its socket pair."""

    popen: subprocess.Popen[bytes]
    sock: socket.socket

    def abandon(self) -> None:
        """Stop it if nobody took it over (a `serve` that failed to start): it holds no
        request, so it is killed, not asked. One the supervisor reaped is left alone."""
        self.sock.close()
        if self.popen.poll() is None:  # `poll` also answers for a process reaped elsewhere
            self.popen.kill()
            self.popen.wait()


def launch(env: Mapping[str, str], providers: Mapping[str, str]) -> Launched:
    """Start a fork server process for `providers` (name -> type: it imports the adapters
    of those types; no event loop needed: `serve` starts the first before it imports the
    supervisor, so both import at once)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        for sock, opt in ((ours, socket.SO_SNDBUF), (theirs, socket.SO_RCVBUF)):
            with contextlib.suppress(OSError):  # the system's cap applies
                sock.setsockopt(socket.SOL_SOCKET, opt, wire.MAX_MESSAGE)
        # The same cwd, umask, limits and stdout/stderr as a spawned worker, and a session
        # of its own (a terminal's Ctrl-C is the supervisor's to handle).
        popen = subprocess.Popen(
            [*worker_command(), "--fork-server", _room_for(list(providers))],
            env={
                **env,
                "TRUNKLINE_FORK_SERVER": str(theirs.fileno()),
                "TRUNKLINE_FORK_SERVER_TYPES": ",".join(sorted(set(providers.values()))),
            },
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            pass_fds=(theirs.fileno(),),
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return Launched(popen, ours)


def start_early(config: Config) -> Launched | None:
    """`serve`'s fork server, started as soon as the configuration is read, if it wants one."""
    if config.supervision.worker_start != "forkserver" or not become_subreaper():
        return None
    keys = [key for p in config.providers.values() for key in p.key_env_names()]
    try:
        enabled = {name: p.type for name, p in config.providers.items() if p.enabled}
        return launch(worker_environment(os.environ, (), keys), enabled)
    except OSError:
        return None  # the daemon tries again, and says why


def become_subreaper() -> bool:
    """Make this process adopt its orphaned descendants (Linux 3.4+): the workers the
    fork server forks become our children."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _room_for(names: list[str]) -> str:
    """The fork server's last argument: long enough that a worker it forks can write its
    own command line (`... -m trunkline.workers <name>`) over the fork server's."""
    longest = max((len(n.encode()) for n in names), default=0)
    return "-" * max(1, longest - len("--fork-server"))
