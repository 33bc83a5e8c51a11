"""Faults with the real daemon: cancellation, dead workers, vanished clients, lost events, bad input."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pynng
import pytest
import trio

from helpers import check_invariants, steps
from trunkline import Client, Message, Request
from trunkline.errors import InvalidRequestError, UnavailableError
from trunkline.protocol import codec
from trunkline.protocol.messages import (
    UNKNOWN_CLIENT,
    ErrorEvent,
    Finish,
    Goodbye,
    Hello,
    ProtocolError,
    Rejected,
    Submit,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
)

pytestmark = pytest.mark.e2e

ARGS = '{"path": "/etc/hosts", "lines": [1, 2, 3]}'


def slow_text(n: int, delay: float = 0.02) -> dict:
    return steps(*[{"text": f"w{i} ", "delay": delay} for i in range(n)], {"finish": "stop"})


async def wait_bus(client: Client, name: str, request_id: str | None = None, provider: str | None = None):
    while True:
        ev = await client.bus_events.receive()
        if (
            ev.name == name
            and (request_id is None or ev.request_id == request_id)
            and (provider is None or ev.provider == provider)
        ):
            return ev


async def test_cancel_mid_text_closes_upstream(daemon):
    request = Request(model="mock:echo", messages=[Message.user("x")], provider_options=slow_text(200))
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir, watch_bus=True) as client:
            events = []
            async with client.stream(request, request_id="req-cancel-text") as stream:
                async for ev in stream:
                    events.append(ev)
                    if type(ev) is TextDelta and len(events) == 5:
                        assert await stream.cancel()
            ev = await wait_bus(client, "llm.call_cancelled", "req-cancel-text")
            assert ev.detail == "upstream closed"
            assert not await client.cancel("req-cancel-text")  # already over: idempotent, and says so
    check_invariants(events)
    response = events[-1].response
    assert type(events[-1]) is Finish and response.finish_reason.reason == "cancelled"
    streamed = "".join(e.text for e in events if type(e) is TextDelta)
    assert response.text == streamed and streamed.startswith("w0 w1 w2 ") and len(streamed) < 200 * 3


async def test_cancel_inside_tool_call_with_partial_arguments_gives_empty_object(daemon):
    request = Request(
        model="mock:echo",
        messages=[Message.user("x")],
        provider_options=steps(
            {"text": "Reading."},
            {"tool_call": {"name": "read_file", "arguments": ARGS, "chunks": len(ARGS), "fragment_delay": 0.02}},
        ),
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            events = []
            async with client.stream(request) as stream:
                async for ev in stream:
                    events.append(ev)
                    if type(ev) is ToolCallDelta and sum(type(e) is ToolCallDelta for e in events) == 10:
                        await stream.cancel()
    check_invariants(events)
    end = next(e for e in events if type(e) is ToolCallEnd)
    assert end.arguments == {}  # a prefix of the JSON does not parse
    assert ARGS.startswith(end.raw_arguments) and 10 <= len(end.raw_arguments) < len(ARGS)
    response = events[-1].response
    assert response.finish_reason.reason == "cancelled"
    assert response.text == "Reading." and response.tool_calls[0].arguments == {}
    assert response.tool_calls[0].name == "read_file"


async def test_cancel_after_all_arguments_arrived_keeps_them_parsed(daemon):
    request = Request(
        model="mock:echo",
        messages=[Message.user("x")],
        provider_options=steps({"tool_call": {"name": "read_file", "arguments": ARGS, "chunks": 3, "hold": 30}}),
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            events = []
            async with client.stream(request) as stream:
                async for ev in stream:
                    events.append(ev)
                    if type(ev) is ToolCallDelta and sum(type(e) is ToolCallDelta for e in events) == 3:
                        await stream.cancel()
    check_invariants(events)
    end = next(e for e in events if type(e) is ToolCallEnd)
    assert end.arguments == {"path": "/etc/hosts", "lines": [1, 2, 3]}
    assert events[-1].response.finish_reason.reason == "cancelled"


async def test_leaving_the_stream_early_cancels_it(daemon):
    request = Request(model="mock:echo", messages=[Message.user("x")], provider_options=slow_text(100))
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir, watch_bus=True) as client:
            async with client.stream(request, request_id="req-leave") as stream:
                async for ev in stream:
                    if type(ev) is TextDelta:
                        break
            await wait_bus(client, "llm.call_cancelled", "req-leave")
            replay = await client.replay("req-leave")
    assert replay.state == "ended"
    last = codec.decode_event(replay.events[-1])
    assert type(last) is Finish and last.response.finish_reason.reason == "cancelled"


async def test_killed_worker_ends_its_streams_and_comes_back(start_daemon):
    daemon = await start_daemon()
    request = Request(model="mock:echo", messages=[Message.user("x")], provider_options=slow_text(500, 0.01))
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, watch_bus=True) as client:
            events = []
            async with client.stream(request) as stream:
                async for ev in stream:
                    events.append(ev)
                    if type(ev) is TextDelta and len(events) == 10:
                        pid = {w.provider: w.pid for w in (await client.status()).workers}["mock"]
                        killed_at = time.monotonic()
                        os.kill(pid, signal.SIGKILL)
            error_after = time.monotonic() - killed_at
            up = await wait_bus(client, "worker.up", provider="mock")
            while up.detail == f"pid {pid}":  # the first worker's own start, if it came late
                up = await wait_bus(client, "worker.up", provider="mock")
            restart_after = time.monotonic() - killed_at
            response = await client.complete("mock:echo", "are you back?")
            status = await client.status()
    check_invariants(events)
    last = events[-1]
    assert type(last) is ErrorEvent and last.error.error_class == "unavailable" and last.error.retryable
    assert "signal 9" in last.error.message
    assert last.partial is not None and last.partial.text.startswith("w0 w1 ")
    assert error_after < 1.0, f"terminal error took {error_after:.3f}s"
    assert response.text == "are you back?"
    mock = {w.provider: w for w in status.workers}["mock"]
    assert mock.restarts == 1 and mock.pid != pid
    print(f"\nkill -9 -> terminal error {error_after * 1000:.1f} ms, -> worker up {restart_after * 1000:.0f} ms")


async def test_crash_loop_trips_the_intensity_limit(start_daemon):
    daemon = await start_daemon(
        {
            "providers": {"flaky": {"type": "mock", "options": {"crash_on_start": True}}},
            "models": {"flaky:echo": {"wire_name": "echo"}},
            "supervision": {"max_restarts": 3, "restart_window_s": 60, "unavailable_retry_s": 300},
        }
    )
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, watch_bus=True) as client:
            # queued while the worker keeps dying: failed once the limit trips
            with pytest.raises(UnavailableError):
                await client.complete("flaky:echo", "hello")
            status = {w.provider: w for w in (await client.status()).workers}
            assert status["flaky"].state == "unavailable" and status["flaky"].restarts == 3
            started = time.monotonic()
            with pytest.raises(UnavailableError, match="unavailable") as info:
                await client.complete("flaky:echo", "hello")
            assert time.monotonic() - started < 0.5  # rejected at once, not queued
            assert info.value.retryable and info.value.retry_after > 200
            # the other provider is untouched
            assert (await client.complete("mock:echo", "still fine")).text == "still fine"


CLIENT_SCRIPT = textwrap.dedent("""
    import sys, trio
    from trunkline import Client, Message, Request

    async def main():
        async with Client(sys.argv[1]) as client:
            steps = [{"text": f"w{i} ", "delay": 0.05} for i in range(400)]
            req = Request(model="mock:echo", messages=[Message.user("x")], provider_options={"mock": {"steps": steps}})
            async with client.stream(req, request_id="req-orphan") as stream:
                async for ev in stream:
                    print(type(ev).__name__, flush=True)
    trio.run(main)
""")


async def test_a_vanished_client_has_its_request_cancelled(daemon):
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-c", CLIENT_SCRIPT, str(daemon.runtime_dir)], stdout=subprocess.PIPE
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir, watch_bus=True) as watcher:
            assert proc.stdout is not None
            seen = b""
            while b"TextDelta" not in seen:
                seen += await proc.stdout.receive_some()
            proc.kill()
            await proc.wait()
            await wait_bus(watcher, "llm.call_cancelled", "req-orphan")
            # Its events belong to the client that went: nobody else may replay them.
            replay = await watcher.replay("req-orphan")
    assert replay.state == "unknown" and not replay.events


async def test_a_subscriber_that_falls_behind_recovers_everything_by_replay(start_daemon):
    """A subscriber that stops reading overflows its own queue, which keeps the newest
    events and drops the oldest: the first event it then sees shows the gap in `seq`,
    and replay brings back the rest (the client's silence check is set far beyond the
    test's deadline, so the gap alone must do it)."""
    n = 90_000  # far more than the client's nng queue (8192 events) and the daemon's per-subscriber queue
    daemon = await start_daemon({"replay": {"ring_events": 100_000}})
    request = Request(
        model="mock:echo",
        messages=[Message.user("x")],
        provider_options=steps({"text": "a"}, {"text": "b"}, {"text": "c"}, repeat=n // 3),
    )
    with trio.fail_after(30):
        async with (
            Client(daemon.runtime_dir, watch_bus=True) as watcher,
            Client(daemon.runtime_dir, silence_check_s=600) as client,
        ):
            gate = trio.Event()
            client._connection.reader_gate = gate  # the client stops reading: the daemon drops what overflows
            stream = client.stream(request, request_id="req-stall")
            await stream.start()
            await wait_bus(watcher, "llm.call_completed", "req-stall")
            client._connection.reader_gate = None
            gate.set()
            events = [ev async for ev in stream]
    check_invariants(events)
    response = events[-1].response
    assert response.text == "abc" * (n // 3)
    assert sum(type(e) is TextDelta for e in events) == n
    assert stream.recovered_events > 1000, "the test meant to lose events but none were lost"
    assert stream.lost_events == 0


async def test_malformed_control_messages_get_typed_errors_and_the_daemon_keeps_serving(daemon):
    sock = pynng.Req0(resend_time=-1)  # a plain nng client, as another language would use
    sock.dial(daemon.control, block=True)
    over = codec.encode(Hello(client_name="x" * (16 * 1024 * 1024 + 100)))
    bad = [
        (b"\xc1\xff\x00garbage", "malformed"),
        (codec.encode({"type": "launch_missiles"}), "Invalid value 'launch_missiles'"),
        (codec.encode({"type": "submit", "request_id": "r"}), "missing required field"),
        (codec.encode({"type": "cancel", "request_id": 5}), "Expected `str`"),
        (codec.encode([1, 2, 3]), "Expected `object`"),
        (over, "exceeds the limit"),
    ]
    try:
        with trio.fail_after(20):
            for data, words in bad:
                with sock.new_context() as ctx:
                    await ctx.asend(data)
                    reply = codec.decode_control_reply(await ctx.arecv())
                assert type(reply) is ProtocolError, reply
                assert reply.error.error_class == "invalid_request"
                assert words in reply.error.message, reply.error.message
            # Far beyond the limit, nng does not even read it: that connection is closed
            # (the call fails at once rather than hanging), and nobody else notices.
            with sock.new_context() as ctx:
                await ctx.asend(codec.encode(Hello(client_name="x" * (20 * 1024 * 1024))))
                with pytest.raises(pynng.NNGException):
                    await ctx.arecv()
            async with Client(daemon.runtime_dir) as client:
                assert (await client.complete("mock:echo", "still here")).text == "still here"
    finally:
        sock.close()


async def test_unknown_fields_are_ignored_for_forward_compatibility(daemon):
    sock = pynng.Req0(resend_time=-1)  # a plain nng client, as another language would use
    sock.dial(daemon.control, block=True)
    try:
        with trio.fail_after(10), sock.new_context() as ctx:
            await ctx.asend(codec.encode({"type": "hello", "client_name": "future", "shiny_new_field": [1]}))
            reply = codec.decode_control_reply(await ctx.arecv())
        assert reply.client_id.startswith("c")
    finally:
        sock.close()


async def test_sigterm_lets_in_flight_requests_finish(start_daemon):
    daemon = await start_daemon()
    request = Request(model="mock:echo", messages=[Message.user("x")], provider_options=slow_text(20, 0.02))
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            async with client.stream(request) as stream:
                async for ev in stream:
                    if type(ev) is TextDelta:
                        daemon.proc.send_signal(signal.SIGTERM)
                        break
                response = await stream.response()
            code = await daemon.stop()
    assert response.finish_reason.reason == "stop" and response.text.count("w") == 20
    assert code == 0


async def test_sigterm_cancels_what_outlives_the_grace_period(start_daemon):
    daemon = await start_daemon({"supervision": {"shutdown_grace_s": 0.3}})
    request = Request(model="mock:echo", messages=[Message.user("x")], provider_options=slow_text(500, 0.05))
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            async with client.stream(request) as stream:
                async for ev in stream:
                    if type(ev) is TextDelta:
                        daemon.proc.send_signal(signal.SIGTERM)
                        break
                response = await stream.response()
            code = await daemon.stop()
    assert response.finish_reason.reason == "cancelled" and 0 < response.text.count("w") < 500
    assert code == 0


async def test_a_second_daemon_on_the_same_endpoint_is_refused(daemon):
    proc = await trio.run_process(
        [
            sys.executable,
            "-m",
            "trunkline.cli",
            "serve",
            "--runtime-dir",
            str(daemon.runtime_dir),
            "--config",
            str(daemon.config_path),
        ],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert proc.returncode == 1
    assert b"another trunkline daemon is already serving" in proc.stderr


async def test_a_daemon_killed_outright_leaves_nothing_to_clean_up(daemon, nursery):
    """kill -9 leaves the ipc socket files behind; the next daemon takes them over."""
    daemon.proc.kill()
    with trio.fail_after(20):
        await daemon.exited.wait()
        assert (daemon.runtime_dir / "control.ipc").exists()
        daemon.ready, daemon.exited = trio.Event(), trio.Event()
        await daemon.start(nursery)
        async with Client(daemon.runtime_dir) as client:
            assert (await client.complete("mock:echo", "on the stale path")).text == "on the stale path"
        assert await daemon.stop() == 0


async def test_runtime_dir_and_sockets_are_private(daemon):
    assert (daemon.runtime_dir.stat().st_mode & 0o777) == 0o700
    # The worker links are socket pairs: nothing on disk that anyone could dial.
    assert sorted(p.name for p in daemon.runtime_dir.iterdir()) == ["control.ipc", "events.ipc"]
    for name in ("control.ipc", "events.ipc"):
        assert ((daemon.runtime_dir / name).stat().st_mode & 0o777) == 0o600, name


async def test_workers_live_as_long_as_the_supervisor_and_no_longer(start_daemon):
    """A worker outlives the thread that started it (trio's cached threads exit after
    ten idle seconds) and dies within seconds of a kill -9 of its supervisor."""
    daemon = await start_daemon()
    slow = Request(
        model="mock:echo", messages=[Message.user("x")], provider_options=steps({"text": "still here", "delay": 12})
    )
    with trio.fail_after(40):
        async with Client(daemon.runtime_dir) as client:
            response = await client.complete(slow)
            mock = {w.provider: w for w in (await client.status()).workers}["mock"]
        assert response.text == "still here" and mock.restarts == 0
        pidfd = os.pidfd_open(mock.pid)
        try:
            daemon.proc.kill()
            await trio.lowlevel.wait_readable(pidfd)  # readable once the worker has exited
        finally:
            os.close(pidfd)


async def test_a_client_owns_its_requests(daemon):
    """Another client can neither cancel, replay nor say goodbye for a request it did
    not submit, nor borrow its request_id or its client_id."""
    slow = Request(
        model="mock:echo",
        messages=[Message.user("x")],
        provider_options=steps(*[{"text": f"w{i} ", "delay": 0.02} for i in range(50)]),
    )
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as victim, Client(daemon.runtime_dir) as attacker:
            async with victim.stream(slow, request_id="req-victim") as stream:
                assert not await attacker.cancel("req-victim")
                assert (await attacker.replay("req-victim")).state == "unknown"
                with pytest.raises(InvalidRequestError, match="in use by another client"):
                    await attacker.complete("mock:echo", "mine now", request_id="req-victim")
                with pytest.raises(InvalidRequestError, match="not given to this connection"):
                    await attacker._connection.call(Goodbye(client_id=victim.client_id))
                attacker_submit = Submit(
                    request_id="req-borrowed",
                    client_id=victim.client_id,
                    request=Request(model="mock:echo", messages=[Message.user("x")]),
                )
                # A submit is refused with `rejected` (as every refused submit is), not a protocol error.
                refused = await attacker._connection.call(attacker_submit)
                assert isinstance(refused, Rejected) and refused.error.provider_code == UNKNOWN_CLIENT
                assert "not given to this connection" in refused.error.message
                response = await stream.response()
            assert response.text == "".join(f"w{i} " for i in range(50))
            # Its owner can replay it.
            assert (await victim.replay("req-victim")).state == "ended"


async def test_a_whole_response_request_keeps_its_partial_when_the_worker_dies(daemon):
    # The worker reports what a whole-response job has gathered with its heartbeats (every
    # 0.2 s here): a crash seconds later still leaves the client that text, and its usage.
    script = steps({"text": "Half an "}, {"text": "answer"}, {"delay": 3}, {"crash": True})
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(UnavailableError) as info:
                await client.complete("mock:echo", "x", provider_options=script)
            back = await client.complete("mock:echo", "back")
    partial = info.value.partial
    assert partial is not None and partial.text == "Half an answer"
    assert partial.finish_reason.reason == "error" and partial.usage.estimated and partial.usage.output_tokens > 0
    assert back.text == "back"


async def test_a_client_learns_within_two_seconds_that_its_daemon_was_killed(start_daemon):
    """kill -9 of the supervisor: a stream and a whole-response request in flight both
    end with `unavailable` within 2 s (it took 11 s: the silence check, then a replay
    that waited for an answer that could not come)."""
    daemon = await start_daemon()
    request = Request(model="mock:echo", messages=[Message.user("x")], provider_options=slow_text(2000, 0.05))
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            ended: dict[str, float] = {}
            killed = trio.Event()

            async def stream_it() -> None:
                async with client.stream(request) as stream:
                    async for ev in stream:
                        if type(ev) is TextDelta and not killed.is_set():
                            killed.set()
                ended["stream"] = time.monotonic()
                assert type(ev) is ErrorEvent and ev.error.error_class == "unavailable"
                assert "lost the connection" in ev.error.message

            async def complete_it() -> None:
                with pytest.raises(UnavailableError, match="lost the connection"):
                    await client.complete(request)
                ended["complete"] = time.monotonic()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(stream_it)
                nursery.start_soon(complete_it)
                await killed.wait()
                daemon.proc.kill()
                at = time.monotonic()
    assert set(ended) == {"stream", "complete"}
    for what, when in ended.items():
        assert when - at < 2.0, f"the {what} learnt it after {when - at:.2f} s"
