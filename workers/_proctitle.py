"""What `ps` and `top` call a worker: `tl-<provider>` (its comm) and, for a worker
forked by the fork server, the command line a spawned worker has."""

from __future__ import annotations

import contextlib
import ctypes
import sys
from pathlib import Path

#: What a worker's command line says (its provider's name follows).
WORKER_ARGS = ("-m", "trunkline.workers")


def set_comm(title: str) -> None:
    with contextlib.suppress(OSError):  # not Linux: the command line still names the provider
        Path("/proc/self/comm").write_text(title[:15])  # the kernel keeps 15 bytes


def worker_args(name: str) -> list[bytes]:
    return [sys.executable.encode(), *(a.encode() for a in WORKER_ARGS), name.encode()]


def _argv_area() -> tuple[int, int] | None:
    """Where the kernel reads /proc/self/cmdline from: the argument strings the process
    was exec'd with (fields 48 and 49 of /proc/self/stat)."""
    try:
        stat = Path("/proc/self/stat").read_bytes()
        fields = stat[stat.rindex(b")") + 2 :].split()
        return int(fields[45]), int(fields[46])
    except (OSError, ValueError, IndexError):
        return None


def set_cmdline(args: list[bytes]) -> bool:
    """Write `args` over the process's own argument strings, so `ps` and `pgrep -f` see
    them. The area cannot grow: what does not fit is cut from the last argument, and
    what is left over is NUL padding before it, so the last argument stays the last
    (`ps` shows the padding as spaces). False when the area cannot be found."""
    area = _argv_area()
    if area is None:
        return False
    start, end = area
    size = end - start
    head = b"".join(arg + b"\0" for arg in args[:-1])
    last = args[-1][: max(0, size - len(head) - 1)] + b"\0"
    if len(head) + len(last) > size:
        return False
    ctypes.memmove(start, head + b"\0" * (size - len(head) - len(last)) + last, size)
    return True
