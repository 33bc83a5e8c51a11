"""A daemon that starts itself: a client with `autostart` starts the daemon of its
config when none answers, later clients (other processes too) share it, and it exits
once no client has come for `autostart.idle_exit_s`."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from helpers import FAST_CONFIG, deep_merge, short_tmpdir
from trunkline import Client
from trunkline.errors import DaemonNotRunning

pytestmark = pytest.mark.e2e


class Home:
    """A user's config and a fresh runtime directory, with no daemon yet."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.dir = short_tmpdir()
        self.runtime_dir = self.dir / "run"
        self.config_path = self.dir / "config.yaml"
        cfg = deep_merge(FAST_CONFIG, {"state_dir": str(self.dir / "state"), **(config or {})})
        self.config_path.write_text(yaml.safe_dump(cfg))

    def client(self, **options: Any) -> Client:
        return Client(self.runtime_dir, config=self.config_path, autostart=True, **options)

    @property
    def log(self) -> Path:
        return self.runtime_dir / "daemon.log"

    def daemons(self) -> list[int]:
        """The daemons running for this home: `serve` processes naming its runtime directory."""
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
            except OSError:
                continue
            if state != "Z" and b"serve" in argv and str(self.runtime_dir).encode() in argv:
                pids.append(int(entry.name))
        return pids


@pytest.fixture
def home() -> Iterator[Home]:
    h = Home({"autostart": {"idle_exit_s": 120}})
    try:
        yield h
    finally:
        _kill_all(h)


def _kill_all(home: Home) -> None:
    """Stop the home's daemons as a service manager would (SIGTERM: they stop their
    workers), killing what is left after a bounded wait."""
    pids = home.daemons()
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while home.daemons() and time.monotonic() < deadline:
        time.sleep(0.05)  # polling for the exit, bounded: a fixture's teardown is not async
    for pid in home.daemons():
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(home.dir, ignore_errors=True)


async def _gone(pid: int) -> None:
    """Until the process has exited (polled; the caller bounds the wait)."""
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            return
        if state == "Z":
            return
        await trio.sleep(0.05)


async def test_autostart_starts_the_daemon_of_the_config_detached_and_it_answers(home, monkeypatch):
    monkeypatch.delenv("TRUNKLINE_AUTOSTART", raising=False)
    assert not home.runtime_dir.exists() and home.daemons() == []
    with trio.fail_after(60):
        async with home.client() as client:
            response = await client.complete("mock:echo", "started for me")
            pid = (await client.status()).pid
    assert response.text == "started for me"
    assert home.daemons() == [pid]
    assert pid != os.getpid()
    # Detached: a session of its own (no terminal's signals), its output in the log.
    assert os.getsid(pid) == pid
    assert os.readlink(f"/proc/{pid}/fd/1") == str(home.log)
    assert os.readlink(f"/proc/{pid}/fd/0") == os.devnull
    log = home.log.read_text()
    assert "started by process" in log and "serving ipc://" in log
    assert oct(home.runtime_dir.stat().st_mode & 0o777) == oct(0o700)
    # A second client finds it and starts nothing.
    with trio.fail_after(30):
        async with home.client() as client:
            assert (await client.status()).pid == pid
    assert home.log.read_text().count("started by process") == 1


async def test_trunkline_autostart_env_turns_it_on_for_the_default_client_and_the_cli(home):
    env = {
        **os.environ,
        "TRUNKLINE_AUTOSTART": "1",
        "TRUNKLINE_CONFIG": str(home.config_path),
        "TRUNKLINE_RUNTIME_DIR": str(home.runtime_dir),
    }

    async def run(*argv: str) -> str:
        with trio.fail_after(60):
            done = await trio.run_process(argv, env=env, capture_stdout=True, capture_stderr=True, check=False)
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout.decode().strip()

    # The first, under asyncio, starts it; trio and the CLI find it.
    on_asyncio = "import asyncio, trunkline; print(asyncio.run(trunkline.generate('mock:echo', 'on asyncio')).text)"
    assert await run(sys.executable, "-c", on_asyncio) == "on asyncio"
    [pid] = home.daemons()
    on_trio = "import trio, trunkline; print(trio.run(trunkline.generate, 'mock:echo', 'on trio').text)"
    assert await run(sys.executable, "-c", on_trio) == "on trio"
    assert await run(sys.executable, "-m", "trunkline.cli", "ask", "mock:echo", "from the cli") == "from the cli"
    assert home.daemons() == [pid]
    assert home.log.read_text().count("started by process") == 1


#: Waits for a go file, then connects with autostart and prints the daemon's pid.
_RACER = """
import os, sys, time, trio
from trunkline import Client

async def main():
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.005)
    async with Client(autostart=True) as client:
        print((await client.status()).pid)

trio.run(main)
"""


async def test_two_clients_starting_at_once_start_one_daemon(home):
    env = {**os.environ, "TRUNKLINE_CONFIG": str(home.config_path), "TRUNKLINE_RUNTIME_DIR": str(home.runtime_dir)}
    go = home.dir / "go"
    racers = [
        subprocess.Popen([sys.executable, "-c", _RACER, str(go)], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    try:
        # Each racer has imported the client and polls for the file: released together.
        go.touch()
        with trio.fail_after(60):
            while any(r.poll() is None for r in racers):
                await trio.sleep(0.05)
        pids = {int(r.communicate()[0]) for r in racers}
        assert all(r.returncode == 0 for r in racers)
    finally:
        for r in racers:
            if r.poll() is None:
                r.kill()
    assert len(pids) == 1
    assert home.daemons() == list(pids)
    assert home.log.read_text().count("started by process") == 1


async def test_an_autostarted_daemon_exits_when_idle_and_the_next_client_starts_another():
    home = Home({"autostart": {"idle_exit_s": 0.5}})
    try:
        with trio.fail_after(60):
            async with home.client() as client:
                first = (await client.status()).pid
                await client.complete("mock:echo", "hi")
            with trio.fail_after(30):
                await _gone(first)
            assert "no client for 0.5s: exiting" in home.log.read_text()
            assert home.daemons() == []
            async with home.client() as client:
                second = (await client.status()).pid
        assert second != first
        assert home.log.read_text().count("started by process") == 2
    finally:
        _kill_all(home)


async def test_a_daemon_that_cannot_start_fails_the_client_with_its_log(monkeypatch):
    monkeypatch.delenv("TRUNKLINE_TOKEN", raising=False)
    # A network endpoint without a token: the config loads, the daemon refuses to start.
    with trio.socket.socket() as s:
        await s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    home = Home({"endpoints": {"control": f"tcp://127.0.0.1:{port}"}})
    try:
        with trio.fail_after(60), pytest.raises(DaemonNotRunning) as info:
            async with home.client():
                pass
        message = str(info.value)
        assert "exited with status 1 before answering" in message
        assert str(home.log) in message and "needs a token: set TRUNKLINE_TOKEN" in message
        assert home.daemons() == []
    finally:
        _kill_all(home)


async def test_without_autostart_the_error_names_the_option(monkeypatch):
    monkeypatch.delenv("TRUNKLINE_AUTOSTART", raising=False)
    monkeypatch.delenv("TRUNKLINE_CONTROL", raising=False)
    home = Home()
    try:
        with trio.fail_after(20), pytest.raises(DaemonNotRunning) as info:
            async with Client(home.runtime_dir):
                pass
        message = str(info.value)
        assert message.startswith(f"no trunkline daemon is running (no socket at {home.runtime_dir}/control.ipc)")
        assert "Client(autostart=True) or TRUNKLINE_AUTOSTART=1" in message
        assert not home.runtime_dir.exists() and home.daemons() == []
    finally:
        _kill_all(home)


async def test_autostart_with_another_endpoint_says_which_daemon_it_would_start(home):
    elsewhere = home.dir / "elsewhere" / "control.ipc"
    with trio.fail_after(20), pytest.raises(DaemonNotRunning) as info:
        async with home.client(control_endpoint=f"ipc://{elsewhere}"):
            pass
    assert f"autostart starts the daemon of {home.config_path}, which answers at ipc://{home.runtime_dir}" in str(
        info.value
    )
    assert home.daemons() == []


async def test_a_config_with_a_mistake_stops_an_autostarting_command_with_status_2(home):
    home.config_path.write_text("autostart:\n  idle_exit_s: -1\n")
    env = {
        **os.environ,
        "TRUNKLINE_AUTOSTART": "1",
        "TRUNKLINE_CONFIG": str(home.config_path),
        "TRUNKLINE_RUNTIME_DIR": str(home.runtime_dir),
    }
    with trio.fail_after(30):
        done = await trio.run_process(
            [sys.executable, "-m", "trunkline.cli", "status"], env=env, capture_stderr=True, check=False
        )
    assert done.returncode == 2
    assert done.stderr.decode().strip() == (
        f"trunkline: config error in {home.config_path} at `autostart.idle_exit_s`: "
        "must be a positive number of seconds, got -1.0"
    )
    assert home.daemons() == []


async def test_a_daemon_slower_than_start_timeout_fails_the_client_naming_its_log():
    # No interpreter starts in 10 ms: the wait is bounded, and says where to look.
    home = Home({"autostart": {"start_timeout_s": 0.01, "idle_exit_s": 0.5}})
    try:
        with trio.fail_after(20), pytest.raises(DaemonNotRunning) as info:
            async with home.client():
                pass
        assert str(info.value) == (
            f"the trunkline daemon for {home.config_path} did not answer at ipc://{home.runtime_dir}/control.ipc "
            f"within 0.01s (autostart.start_timeout_s); see its log {home.log}"
        )
    finally:
        _kill_all(home)
