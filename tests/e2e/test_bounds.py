"""What one client can hold at the socket level, each bound tried by an attack that
would exceed it, with an innocent client served beside it.

The attackers are plain pynng programs in their own processes, as a client in any
language would be. Two of them must not read: one stops itself (SIGSTOP), the
other uses nng's raw Req0, whose application supplies each request's id (pynng
frames the messages; the attacker only never reads its replies)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pynng
import pytest
import trio

from helpers import DaemonProcess, steps
from trunkline import Client
from trunkline.errors import RateLimitError, UnavailableError
from trunkline.protocol import codec
from trunkline.protocol.messages import Message, ProtocolError, Request

pytestmark = pytest.mark.e2e


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def spawn(script: str, *args: str) -> trio.Process:
    return await trio.lowlevel.open_process(
        [sys.executable, "-c", textwrap.dedent(script), *args], stdout=subprocess.PIPE
    )


async def read_until(proc: trio.Process, word: bytes) -> None:
    assert proc.stdout is not None
    seen = b""
    while word not in seen:
        chunk = await proc.stdout.receive_some()
        assert chunk, f"the attacker ended before saying {word!r}"
        seen += chunk


async def stopped(pid: int) -> None:
    """Until the process has stopped itself (waitpid sees it: no polling)."""
    await trio.to_thread.run_sync(lambda: os.waitpid(pid, os.WUNTRACED))


def kill(proc: trio.Process) -> None:
    if proc.returncode is None:
        proc.kill()
        os.kill(proc.pid, signal.SIGCONT)


class PipeWatch:
    """Tells, from nng's own threads, when a socket's connections come and go."""

    def __init__(self, sock: pynng.Socket) -> None:
        self.token = trio.lowlevel.current_trio_token()
        self.added = trio.Event()
        self.removed = trio.Event()
        self.on_removed = self.removed.set
        sock.add_post_pipe_connect_cb(lambda pipe: self.token.run_sync_soon(self.added.set))
        sock.add_post_pipe_remove_cb(lambda pipe: self.token.run_sync_soon(self.on_removed))


async def test_one_connection_too_many_is_refused_and_the_others_are_untouched(start_daemon):
    daemon = await start_daemon({"limits": {"max_connections": 4}})
    extra = pynng.Req0(resend_time=-1, reconnect_time_min=1000, reconnect_time_max=1000)
    listener = pynng.Sub0(reconnect_time_min=1000, reconnect_time_max=1000)
    try:
        with trio.fail_after(30):
            async with (
                Client(daemon.runtime_dir) as a,
                Client(daemon.runtime_dir) as b,
                Client(daemon.runtime_dir) as c,
                Client(daemon.runtime_dir) as d,
            ):
                # Four clients hold four connections on each endpoint: a fifth is closed
                # as soon as it is made, on either endpoint.
                for sock, url in ((extra, daemon.control), (listener, daemon.control.replace("control", "events"))):
                    watch = PipeWatch(sock)
                    sock.dial(url, block=False)
                    await watch.added.wait()
                    await watch.removed.wait()
                for client in (a, b, c, d):
                    assert (await client.complete("mock:echo", "still served")).text == "still served"
                status = await a.status()
            # Once they have gone, there is room again.
            async with Client(daemon.runtime_dir) as again:
                assert (await again.complete("mock:echo", "room again")).text == "room again"
    finally:
        extra.close()
        listener.close()
    assert status.in_flight == 0


PIPELINER = """
    import signal, sys
    import pynng
    from pynng._nng import lib
    from trunkline.protocol import codec
    sock = pynng.Req0(opener=lib.nng_req0_open_raw, recv_buffer_size=1)
    sock.dial(sys.argv[1], block=True)
    body = codec.encode({"type": "list_models"})
    for i in range(int(sys.argv[2])):
        msg = pynng.Message(body)
        lib.nng_msg_header_append_u32(msg._nng_msg, 0x80000000 | i)  # the request id raw Req0 leaves to us
        sock.send_msg(msg)
    print("sent", flush=True)
    signal.pause()
"""


async def test_replies_a_client_never_reads_cost_the_daemon_nothing(daemon):
    """30,000 requests whose large replies (the catalog, ~20 KB each) are never read:
    unbounded, the daemon would hold over half a gigabyte for them."""
    with trio.fail_after(120):
        async with Client(daemon.runtime_dir) as innocent:
            await innocent.list_models()
            before = rss_mib(daemon.proc.pid)
            attacker = await spawn(PIPELINER, daemon.control, "30000")
            try:
                await read_until(attacker, b"sent")
                # The daemon answered every request: the attacker's last one was sent
                # after all the others, on the same connection, and is handled in order.
                assert (await innocent.complete("mock:echo", "served beside it")).text == "served beside it"
                await innocent.list_models()
                grown = rss_mib(daemon.proc.pid) - before
            finally:
                kill(attacker)
    assert grown < 40, f"the daemon grew {grown:.0f} MiB for replies nobody reads"


SLEEPER = """
    import os, signal, sys
    import pynng
    sock = pynng.Sub0(recv_buffer_size=1)
    sock.subscribe(b"")  # everything, and never read it
    sock.dial(sys.argv[1], block=True)
    print("subscribed", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
"""


async def test_a_subscriber_that_never_reads_holds_only_its_queue(start_daemon):
    queue = 64
    # Finished requests' replay rings get a tiny budget, so what is measured is what the
    # subscribers hold.
    daemon = await start_daemon(
        {"limits": {"subscriber_queue": queue}, "replay": {"max_bytes": 1_000_000, "keep_s": 1.0}}
    )
    events_url = daemon.control.replace("control", "events")
    chunk = "x" * 4000
    requests = 150  # each 50 deltas of 4 KB, then its whole text twice (text_end, finish): ~60 MB in all
    request = Request(
        model="mock:echo", messages=[Message.user("x")], provider_options=steps({"text": chunk}, repeat=50)
    )
    sleepers: list[trio.Process] = []
    try:
        with trio.fail_after(180):
            async with Client(daemon.runtime_dir) as innocent:

                async def load() -> None:
                    for _ in range(requests):
                        async with innocent.stream(request) as stream:
                            response = await stream.response()
                        assert response.text == chunk * 50

                # The same load with nobody asleep, twice: the first warms the allocator
                # up, the second shows what the load itself costs (terminal events kept
                # for replay, the heap's own drift), which is not what this test measures.
                await load()
                before = rss_mib(daemon.proc.pid)
                await load()
                awake = rss_mib(daemon.proc.pid) - before
                for _ in range(3):
                    proc = await spawn(SLEEPER, events_url)
                    sleepers.append(proc)
                    await read_until(proc, b"subscribed")
                    await stopped(proc.pid)
                before = rss_mib(daemon.proc.pid)
                await load()
                grown = rss_mib(daemon.proc.pid) - before - awake
    finally:
        for proc in sleepers:
            kill(proc)
    # The sleepers pin at most the newest `queue` event messages (shared copies), each at
    # most 64 KiB or one event (~200 KB here): ~13 MB; unbounded, the whole 60 MB or more.
    assert grown < 25, f"the daemon grew {grown:.0f} MiB more for three subscribers that never read"


LIMITED = "import os, resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard})); os.execv(sys.argv[1], sys.argv[1:])"


class LimitedDaemon(DaemonProcess):
    def __init__(self, soft: int, hard: int, config: dict | None = None) -> None:
        super().__init__(config)
        self.limits = (soft, hard)

    def command(self) -> list[str]:
        soft, hard = self.limits
        return [sys.executable, "-c", LIMITED.format(soft=soft, hard=hard), *super().command()]


async def test_idle_connections_never_keep_a_worker_from_restarting(nursery):
    """Under `ulimit -n 256`, 400 idle connections used to take every descriptor, and a
    crashed worker could not be started again: the provider was unavailable."""
    daemon = LimitedDaemon(256, 256)
    hogs: list[pynng.Req0] = []
    try:
        await daemon.start(nursery)
        with trio.fail_after(90):
            async with Client(daemon.runtime_dir, watch_bus=True) as innocent:
                refused = trio.Event()  # one hog was turned away: the daemon holds all it will
                for _ in range(400):
                    sock = pynng.Req0(resend_time=-1, reconnect_time_min=2000, reconnect_time_max=2000)
                    watch = PipeWatch(sock)
                    watch.on_removed = refused.set
                    sock.dial(daemon.control, block=False)
                    hogs.append(sock)
                await refused.wait()
                crash = Request(
                    model="mock:echo", messages=[Message.user("x")], provider_options=steps({"crash": True})
                )
                with pytest.raises(UnavailableError):
                    await innocent.complete(crash)
                while (ev := await innocent.bus_events.receive()).name != "worker.up" or ev.provider != "mock":
                    pass
                assert (await innocent.complete("mock:echo", "after the restart")).text == "after the restart"
                assert len(os.listdir(f"/proc/{daemon.proc.pid}/fd")) <= 256
    finally:
        for sock in hogs:
            sock.close()
        await daemon.stop()
        daemon.cleanup()


async def test_the_daemon_raises_its_descriptor_limit_to_the_hard_limit(nursery):
    daemon = LimitedDaemon(128, 512)
    try:
        await daemon.start(nursery)
        limits = Path(f"/proc/{daemon.proc.pid}/limits").read_text()
        line = next(line for line in limits.splitlines() if line.startswith("Max open files"))
        assert line.split()[3:5] == ["512", "512"], line
    finally:
        await daemon.stop()
        daemon.cleanup()


def submit_bytes(client_id: str, request_id: str, **request: object) -> bytes:
    body = {"model": "mock:echo", "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}], **request}
    return msgspec.msgpack.encode({"type": "submit", "request_id": request_id, "client_id": client_id, "request": body})


async def test_a_list_too_long_is_refused_as_it_is_read_and_costs_nothing(daemon):
    """Four submits of 15 MB, five million stop sequences each, once pinned 1.4 GB in the
    supervisor and as much in the worker: each is refused by its stated length, naming
    the limit, before one item is decoded."""
    sock = pynng.Req0(resend_time=-1)
    sock.dial(daemon.control, block=True)
    try:
        with trio.fail_after(60):
            async with Client(daemon.runtime_dir) as innocent:
                await innocent.complete("mock:echo", "warm")
                before = rss_mib(daemon.proc.pid)
                for i in range(4):
                    await sock.asend(submit_bytes(innocent.client_id, f"big-{i}", stop_sequences=["ab"] * 5_000_000))
                    reply = codec.decode_control_reply(await sock.arecv())
                    assert type(reply) is ProtocolError and reply.error.error_class == "invalid_request"
                    assert "length <= 256" in reply.error.message and "stop_sequences" in reply.error.message
                grown = rss_mib(daemon.proc.pid) - before
                assert (await innocent.complete("mock:echo", "served beside it")).text == "served beside it"
    finally:
        sock.close()
    # Receiving 60 MB costs its copies (nng's and ours) at most; the decoded lists
    # would be ~360 MiB a submit.
    assert grown < 100, f"the supervisor grew {grown:.0f} MiB for refused submits"


async def test_a_connection_s_running_requests_and_their_bytes_are_bounded(start_daemon):
    daemon = await start_daemon(
        {"limits": {"max_requests_per_client": 3, "max_message_bytes": 65536, "max_bytes_per_client": 100_000}}
    )

    def slow(text: str = "x") -> Request:
        return Request(
            model="mock:echo", messages=[Message.user(text)], provider_options=steps({"text": "a", "delay": 30})
        )

    async def ended(stream) -> None:
        await stream.cancel()
        assert (await stream.response()).finish_reason.reason == "cancelled"

    with trio.fail_after(60):
        async with Client(daemon.runtime_dir) as busy, Client(daemon.runtime_dir) as other:
            held = [await busy.stream(slow()).start() for _ in range(3)]
            with pytest.raises(RateLimitError, match=r"limits.max_requests_per_client = 3"):
                await busy.submit(slow())
            # Another connection is untouched.
            assert (await other.complete("mock:echo", "served")).text == "served"
            await ended(held[0])
            # One ended: room for one more.
            assert (await busy.complete("mock:echo", "room again")).text == "room again"
            for stream in held[1:]:
                await ended(stream)
            # Bytes: two submits of ~60 KB pass 100,000 bytes together.
            first = await busy.stream(slow("y" * 60_000)).start()
            with pytest.raises(RateLimitError, match=r"limits.max_bytes_per_client = 100000"):
                await busy.submit(slow("z" * 60_000))
            await ended(first)
