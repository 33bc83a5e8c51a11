"""The fork server (`supervision.worker_start: forkserver`, the default) with the real
daemon: a forked worker is the supervisor's child in the state a spawned one starts
in, the fork server holds no key and one thread, killing it under load loses no
request and workers are spawned until it is back, and `spawn` (also by reload)."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import trio
import yaml

from fakes.upstream import FakeUpstream, Reply
from helpers import FAST_CONFIG, DaemonProcess, deep_merge, short_tmpdir, steps
from trunkline import Client, Message, Request
from trunkline.protocol.messages import Finish
from trunkline.supervisor.forkserver import ForkServer
from trunkline.supervisor.launch import Launched
from trunkline.workers import _forkserver

pytestmark = pytest.mark.e2e

KEY = "fork-test-anthropic-key-0123456789abcdef"
TOKEN = "fork-test-daemon-token-0123456789"
MODEL = "anthropic:held"
ANSWER = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 10, "output_tokens": 1},
}


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        out += [int(p) for p in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return out


def comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def status_fields(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def fork_server_of(daemon: DaemonProcess) -> int | None:
    assert daemon.proc is not None
    found = [p for p in children(daemon.proc.pid) if comm(p) == "tl-forkserver"]
    return found[0] if found else None


async def worker_pids(client: Client) -> dict[str, int]:
    return {w.provider: w.pid for w in (await client.status()).workers if w.pid}


async def wait_lines(daemon: DaemonProcess, text: str, count: int) -> list[str]:
    """The daemon's output lines holding `text`, once there are `count` (bound it with fail_after)."""
    while len(found := [line for line in daemon.lines if text in line]) < count:
        await trio.sleep(0.02)
    return found


async def restarted(client: Client, provider: str, old_pid: int) -> int:
    """Kill `provider`'s worker and wait for its successor's `worker.up`; its pid."""
    os.kill(old_pid, signal.SIGKILL)
    while True:
        ev = await client.bus_events.receive()
        if ev.name == "worker.up" and ev.provider == provider and ev.detail != f"pid {old_pid}":
            return int(ev.detail.removeprefix("pid "))


@pytest.fixture
async def upstream(nursery) -> FakeUpstream:
    up = await FakeUpstream().start(nursery)
    up.route("POST", "/v1/messages", Reply.json(ANSWER))
    return up


def anthropic_at(upstream: FakeUpstream, worker_start: str) -> dict:
    return {
        "providers": {"anthropic": {"base_url": upstream.base_url}},
        "models": {MODEL: {"wire_name": "claude-sonnet-4-5", "context_window": 200000, "max_output": 64000}},
        "supervision": {"worker_start": worker_start},
    }


#: Starts the daemon as `nohup` does: SIGHUP ignored, then exec.
HANGUP_IGNORED = (
    "import os, signal, sys; signal.signal(signal.SIGHUP, signal.SIG_IGN); os.execv(sys.argv[1], sys.argv[1:])"
)


class HangupIgnoredDaemon(DaemonProcess):
    def command(self) -> list[str]:
        return [sys.executable, "-c", HANGUP_IGNORED, *super().command()]


async def test_a_daemon_started_under_nohup_gives_both_kinds_of_worker_the_same_signals(nursery, upstream):
    """The fork server starts before the supervisor handles SIGHUP, so it inherits the
    ignore `nohup` gives; its workers kept it while spawned ones lost it at exec."""
    seen: dict[str, str] = {}
    for how in ("forkserver", "spawn"):
        daemon = HangupIgnoredDaemon(anthropic_at(upstream, how), {"ANTHROPIC_API_KEY": KEY})
        try:
            await daemon.start(nursery)
            with trio.fail_after(30):
                async with Client(daemon.runtime_dir) as client:
                    assert (await client.complete(MODEL, "hi")).text == "ok"
                    pid = (await worker_pids(client))["anthropic"]
            assert daemon.proc is not None
            assert int(status_fields(daemon.proc.pid)["SigIgn"], 16) & (1 << (signal.SIGHUP - 1)) == 0  # handled
            seen[how] = status_fields(pid)["SigIgn"]
        finally:
            if daemon.proc is not None and daemon.proc.returncode is None:
                await daemon.stop()
            daemon.cleanup()
    assert int(seen["forkserver"], 16) & (1 << (signal.SIGHUP - 1)) == 0  # a hang-up ends a worker, as spawned
    assert seen["forkserver"] == seen["spawn"]


async def test_a_forked_worker_starts_in_the_state_a_spawned_one_does(start_daemon, upstream):
    env = {"ANTHROPIC_API_KEY": KEY, "TRUNKLINE_TOKEN": TOKEN}
    forked = await start_daemon(anthropic_at(upstream, "forkserver"), env=env)
    spawned = await start_daemon(anthropic_at(upstream, "spawn"), env=env)
    seen: dict[str, dict[str, str]] = {}
    with trio.fail_after(30):
        for how, daemon in (("forked", forked), ("spawned", spawned)):
            assert daemon.proc is not None
            async with Client(daemon.runtime_dir) as client:
                assert (await client.complete(MODEL, "hi")).text == "ok"  # its key reached the provider
                pid = (await worker_pids(client))["anthropic"]
            assert upstream.sent("/v1/messages")[-1].headers["x-api-key"] == KEY
            await daemon.wait_for_line(f"provider anthropic: worker {pid} {how}")
            fields = status_fields(pid)
            assert int(fields["PPid"]) == daemon.proc.pid  # the supervisor waits for it, gets its status
            assert os.getsid(pid) == pid  # a session of its own
            assert comm(pid) == "tl-anthropic"
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            assert b"trunkline.workers" in cmdline and cmdline[-2] == b"anthropic"
            seen[how] = {k: fields[k] for k in ("SigBlk", "SigIgn", "SigCgt", "Umask")}
            seen[how]["cwd"] = os.readlink(f"/proc/{pid}/cwd")
    assert seen["forked"] == seen["spawned"]
    server = fork_server_of(forked)
    assert server is not None and fork_server_of(spawned) is None
    environ = Path(f"/proc/{server}/environ").read_bytes()
    assert KEY.encode() not in environ and TOKEN.encode() not in environ  # it holds no credential
    assert os.listdir(f"/proc/{server}/task") == [str(server)]  # one thread, after its forks too
    fds = os.listdir(f"/proc/{server}/fd")
    assert len(fds) == 4 and {"0", "1", "2"} < set(fds)  # stdin/out/err and its socket, no other file


def test_the_fork_server_refuses_to_fork_while_it_has_a_thread():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert "threads; it forks only with one" in _forkserver._why_not([99])
    finally:
        stop.set()
        thread.join()


async def test_killing_the_fork_server_under_load_loses_no_request(start_daemon):
    daemon = await start_daemon()
    assert daemon.proc is not None
    slow = Request(
        model="mock:echo",
        messages=[Message.user("x")],
        provider_options=steps(*[{"text": f"w{i} ", "delay": 0.02} for i in range(40)], {"finish": "stop"}),
    )
    ends: list[object] = []

    async def stream(client: Client) -> None:
        async with client.stream(slow) as events:
            ends.extend([ev async for ev in events][-1:])

    with trio.fail_after(60):
        await daemon.wait_for_line("fork server: ready")
        server = fork_server_of(daemon)
        assert server is not None
        async with Client(daemon.runtime_dir, watch_bus=True) as client:
            assert (await client.complete("mock:echo", "up")).text == "up"  # its worker is forked
            async with trio.open_nursery() as load:
                for _ in range(16):
                    load.start_soon(stream, client)
                while (await client.status()).in_flight < 16:
                    await trio.sleep(0.01)
                os.kill(server, signal.SIGKILL)
            assert len(ends) == 16 and all(type(e) is Finish for e in ends)  # none was lost
            assert (await client.complete("mock:echo", "still here")).text == "still here"

            # While it is down, a worker that dies comes back spawned (killed again once it is
            # back, so that the worker dies within its restart pause and the next one's import)...
            await wait_lines(daemon, "fork server: ready", 2)
            server = fork_server_of(daemon)
            assert server is not None
            os.kill(server, signal.SIGKILL)
            await wait_lines(daemon, "fork server: restarting", 2)
            pid = await restarted(client, "mock", (await worker_pids(client))["mock"])
            await daemon.wait_for_line(f"provider mock: worker {pid} spawned")
            assert (await client.complete("mock:echo", "back")).text == "back"

            # ... and once it is back, forked again.
            await wait_lines(daemon, "fork server: ready", 3)
            pid = await restarted(client, "mock", pid)
            await daemon.wait_for_line(f"provider mock: worker {pid} forked")
            assert (await client.complete("mock:echo", "forked")).text == "forked"


async def test_spawn_keeps_the_plain_start_and_a_reload_turns_the_fork_server_on(start_daemon):
    daemon = await start_daemon({"supervision": {"worker_start": "spawn"}})
    with trio.fail_after(60):
        async with Client(daemon.runtime_dir, watch_bus=True) as client:
            assert (await client.complete("mock:echo", "up")).text == "up"
            pid = (await worker_pids(client))["mock"]
            await daemon.wait_for_line(f"provider mock: worker {pid} spawned")
            assert fork_server_of(daemon) is None

            config = yaml.safe_load(daemon.config_path.read_text())
            config["supervision"]["worker_start"] = "forkserver"
            daemon.config_path.write_text(yaml.safe_dump(config))
            assert (await client.reload()).ok
            await daemon.wait_for_line("fork server: ready")
            pid = await restarted(client, "mock", pid)
            await daemon.wait_for_line(f"provider mock: worker {pid} forked")
            assert (await client.complete("mock:echo", "hi")).text == "hi"

            config["supervision"]["worker_start"] = "spawn"
            daemon.config_path.write_text(yaml.safe_dump(config))
            assert (await client.reload()).ok
            pid = await restarted(client, "mock", pid)
            await daemon.wait_for_line(f"provider mock: worker {pid} spawned")
            assert (await client.complete("mock:echo", "hi")).text == "hi"


async def test_a_forked_worker_imports_nothing_to_start_and_serve(start_daemon, upstream):
    """What a forked worker imports itself is private to it: the fork server imports what
    a worker's start and first request need (the idna codec of its first connection too)."""
    env = {"ANTHROPIC_API_KEY": KEY, "PYTHONPROFILEIMPORTTIME": "1"}
    daemon = await start_daemon(anthropic_at(upstream, "forkserver"), env=env)
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, watch_bus=True) as client:
            assert (await client.complete(MODEL, "hi")).text == "ok"  # the supervisor's first request
            before = len(daemon.lines)
            pid = await restarted(client, "anthropic", (await worker_pids(client))["anthropic"])
            await daemon.wait_for_line(f"provider anthropic: worker {pid} forked")
            assert (await client.complete(MODEL, "again")).text == "ok"
            # A line the supervisor writes after the worker's imports: the output holds them by then.
            assert (await client.reload()).ok
            await daemon.wait_for_line("reloaded")
    imports = [line for line in daemon.lines[before:] if line.startswith("import time:")]
    assert imports == []


async def test_a_daemon_stopping_before_its_fork_server_is_ready_ends_it_cleanly():
    """A short-lived daemon may stop while its fork server still imports: the wait for
    its `ready` ends (its socket closed under it) and the process is killed, no error."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    never_ready = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    server = ForkServer(os.environ, (), {"mock": "mock"}, early=Launched(never_ready, ours))
    server.want(True)
    try:
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                await nursery.start(server.run)
                while server.state != "starting":
                    await trio.sleep(0.01)
                server.want(False)  # what the shutdown does
                while never_ready.returncode is None:  # reaped by the fork server's watcher
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
        assert never_ready.returncode == -signal.SIGKILL and server.state == "off"
    finally:
        theirs.close()
        if never_ready.returncode is None:
            never_ready.kill()
            never_ready.wait()
        ctypes.CDLL(None).prctl(36, 0, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER off: pytest adopts no orphan


def test_a_serve_that_cannot_start_leaves_no_fork_server_writing_after_its_error(monkeypatch, request):
    """`serve` starts its fork server before the daemon can fail (here: a network
    endpoint without a token). The fork server must end with it: reading the command's
    output to its end waits for every process holding it, and finds the daemon's error
    last, no fork server's traceback after it."""
    monkeypatch.delenv("TRUNKLINE_TOKEN", raising=False)
    home = short_tmpdir()
    request.addfinalizer(lambda: shutil.rmtree(home, ignore_errors=True))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = deep_merge(
        FAST_CONFIG, {"state_dir": str(home / "state"), "endpoints": {"control": f"tcp://127.0.0.1:{port}"}}
    )
    (home / "config.yaml").write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trunkline.cli",
            "serve",
            "--config",
            str(home / "config.yaml"),
            "--runtime-dir",
            str(home / "run"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=60,
    )
    output = done.stdout.decode()
    assert done.returncode == 1, output
    assert "needs a token: set TRUNKLINE_TOKEN" in output.splitlines()[-1], output
    assert "Traceback" not in output


def test_a_fork_server_whose_supervisor_has_gone_exits_quietly():
    """Its supervisor gone before it is ready (a `serve` that failed): the fork server's
    `ready` meets a closed socket, and it exits 0 without a word."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen(
        [sys.executable, "-m", "trunkline.workers", "--fork-server", "gone"],
        env={**os.environ, "TRUNKLINE_FORK_SERVER": str(theirs.fileno()), "TRUNKLINE_FORK_SERVER_TYPES": "mock"},
        pass_fds=(theirs.fileno(),),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    theirs.close()
    ours.close()
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and output == b"", output.decode()


def test_the_fork_server_preloads_what_workers_run_and_no_file_reader():
    """What the fork server imports is in every worker's pages: the runtime and the
    adapters, never PyYAML (a worker reads no config file) nor difflib (a hint's)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen(
        [sys.executable, "-m", "trunkline.workers", "--fork-server", "imports"],
        env={
            **os.environ,
            "TRUNKLINE_FORK_SERVER": str(theirs.fileno()),
            "TRUNKLINE_FORK_SERVER_TYPES": "anthropic,openai,openai_compat,gemini,ollama,mock",
            "PYTHONPROFILEIMPORTTIME": "1",
        },
        pass_fds=(theirs.fileno(),),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    theirs.close()
    try:
        ours.settimeout(60)
        assert ours.recv(1024)  # ready: everything is imported
    finally:
        ours.close()
    _, err = proc.communicate(timeout=60)
    modules = {line.rsplit("|", 1)[1].strip() for line in err.decode().splitlines() if line.startswith("import time:")}
    # (An adapter module itself comes through importlib.import_module, which -X importtime
    # does not time: its own imports are what show.)
    assert {"trunkline.workers._runtime", "trunkline.workers.gemini.request", "httpcore._backends.trio"} <= modules
    assert not {"yaml", "difflib"} & modules
