"""What the benchmark reads about processes from outside: CPU time and memory from /proc,
and child processes that speak one JSON line at a time over their stdin/stdout.

Reading /proc instead of asking the processes keeps the systems under test
unchanged: trunkline's supervisor and workers, the LiteLLM proxy and the fake
upstream are all measured the same way.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, all its threads, living and exited (10 ms ticks)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    # The command name may hold spaces and parentheses: split after its closing one.
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _kib_field(path: str, key: str) -> float | None:
    """A `Key:  N kB` line of a /proc file, in MiB; None if the file or key is missing."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def rss_mb(pid: int) -> float:
    """Resident memory (VmRSS) in MiB; 0 when the process is gone."""
    return _kib_field(f"/proc/{pid}/status", "VmRSS:") or 0.0


def pss_mb(pid: int) -> float:
    """Proportional set size in MiB: each page shared by n processes counts 1/n in each,
    so unlike RSS it can be summed over processes that share the python binary and
    its libraries. RSS when smaps_rollup cannot be read (kernels before 4.14)."""
    pss = _kib_field(f"/proc/{pid}/smaps_rollup", "Pss:")
    return rss_mb(pid) if pss is None else pss


def children(pid: int) -> list[int]:
    """Every descendant of a process (the proxy's server process, a worker's helpers)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                kids = Path(f"/proc/{parent}/task/{tid}/children").read_text().split()
            except OSError:
                continue
            for kid in map(int, kids):
                if kid not in out:
                    out.append(kid)
                    todo.append(kid)
    return out


def tree(pid: int) -> list[int]:
    return [pid, *children(pid)]


def self_cpu() -> float:
    """This process's CPU, with microsecond resolution (all its threads)."""
    t = os.times()
    return t.user + t.system


@dataclass
class CpuMeter:
    """CPU used by named groups of processes between `start()` and `stop()`."""

    groups: dict[str, Sequence[int]]
    include_self: bool = True
    used: dict[str, float] = field(default_factory=dict)
    _before: dict[str, float] = field(default_factory=dict)

    def _read(self) -> dict[str, float]:
        now = {name: sum(cpu_seconds(p) for p in pids) for name, pids in self.groups.items()}
        if self.include_self:
            now["client"] = self_cpu()
        return now

    def start(self) -> CpuMeter:
        self._before = self._read()
        return self

    def stop(self) -> dict[str, float]:
        after = self._read()
        self.used = {name: after[name] - self._before.get(name, 0.0) for name in after}
        return self.used


class LineProcess:
    """A child that takes one JSON command per stdin line and answers one JSON line.

    Children are written to exit when their stdin closes, so a benchmark that
    dies never leaves them behind."""

    def __init__(
        self, argv: Sequence[str], env: dict[str, str] | None = None, cwd: str | None = None, log: Path | None = None
    ) -> None:
        self.argv = list(argv)
        self.env = env
        self.cwd = cwd
        self.log = log
        self.proc: trio.Process | None = None
        self._buf = b""
        self._log_file: Any = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self) -> LineProcess:
        self._log_file = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115 - closed in stop()
        self.proc = await trio.lowlevel.open_process(
            self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log_file, env=self.env, cwd=self.cwd
        )
        return self

    async def readline(self, timeout_s: float = 120.0) -> str:
        assert self.proc is not None
        assert self.proc.stdout is not None
        with trio.fail_after(timeout_s):
            while b"\n" not in self._buf:
                chunk = await self.proc.stdout.receive_some(65536)
                if not chunk:
                    raise EOFError(f"{self.argv[0]} exited (status {self.proc.poll()}); see {self.log}")
                self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode()

    async def send(self, obj: Any) -> None:
        assert self.proc is not None
        assert self.proc.stdin is not None
        await self.proc.stdin.send_all(json.dumps(obj).encode() + b"\n")

    async def call(self, obj: Any, timeout_s: float = 600.0) -> Any:
        await self.send(obj)
        return json.loads(await self.readline(timeout_s))

    async def stop(self, grace_s: float = 5.0) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.stdin is not None:
            with trio.move_on_after(1):
                await proc.stdin.aclose()
        if proc.returncode is None:
            with trio.move_on_after(grace_s):
                await proc.wait()
        await terminate(proc, grace_s)
        if self._log_file not in (None, subprocess.DEVNULL):
            self._log_file.close()


async def terminate(proc: trio.Process, grace_s: float) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `grace_s`."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        with trio.move_on_after(grace_s):
            await proc.wait()
    if proc.returncode is None:
        proc.kill()
        await proc.wait()


def kill_tree(pids: Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
