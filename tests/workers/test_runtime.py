"""The worker runtime in-process with the mock adapter: retries, deadlines, cancellation, under a mock clock."""

from __future__ import annotations

import math
import random

import pytest
import trio
import trio.testing

from helpers import check_invariants
from trunkline.config.loader import ProviderConfig, RetryPolicy, TimeoutPolicy
from trunkline.protocol.codec import decode_event, split_frame
from trunkline.protocol.messages import (
    RETRYABLE,
    BusEvent,
    ErrorEvent,
    Finish,
    Job,
    Message,
    ModelInfo,
    Price,
    Request,
    TextDelta,
    Timeouts,
)
from trunkline.workers._retry import backoff_delay, decide
from trunkline.workers._runtime import JobRunner, Outbox
from trunkline.workers._toolids import ToolIdMap
from trunkline.workers.errors import ProviderError
from trunkline.workers.mock.adapter import MockAdapter

MODEL = ModelInfo(id="mock:echo", provider="mock", wire_name="echo", price=Price(input=1.0, output=2.0))
POLICY = RetryPolicy(
    max_retries=2, base_delay_s=1.0, multiplier=2.0, max_delay_s=60.0, jitter=0.0, retry_after_cap_s=60.0
)
TIMEOUTS = TimeoutPolicy(connect_s=10, request_s=600, stream_idle_s=60)


def make_runner(policy: RetryPolicy = POLICY, timeouts: TimeoutPolicy = TIMEOUTS) -> JobRunner:
    adapter = MockAdapter("mock", ProviderConfig(type="mock"), policy, timeouts)
    return JobRunner(adapter, Outbox(), ToolIdMap(None), rng=random.Random(1))


def job(*steps: dict, stream: bool = True, rid: str = "r1", **fields) -> Job:
    request = Request(
        model="mock:echo",
        messages=[Message.user("hello world")],
        provider_options={"mock": {"steps": list(steps)}} if steps else {},
        **fields,
    )
    return Job(request_id=rid, client_id="c1", request=request, model=MODEL, operation_id=f"op-{rid}", stream=stream)


def drain(runner: JobRunner) -> tuple[list, list[BusEvent]]:
    events, bus = [], []
    for item in runner.outbox._queue:
        for frame in getattr(item, "frames", []):
            topic, body = split_frame(frame)
            (bus if topic == "bus" else events).append(decode_event(body))
    runner.outbox._queue.clear()
    return events, bus


async def test_retryable_errors_back_off_exponentially(autojump_clock):
    runner = make_runner()
    await runner.run(job({"error": {"error_class": "server_error", "status": 503, "attempts": 2}}, {"text": "ok"}))
    events, bus = drain(runner)
    check_invariants(events)
    assert events[-1].response.text == "ok"
    assert trio.current_time() == pytest.approx(1.0 + 2.0)  # base 1 s, then x2
    names = [b.name for b in bus]
    assert names.count("llm.call_started") == 3 and names.count("llm.call_failed") == 2
    assert [b.wait_s for b in bus if b.name == "llm.retrying"] == [1.0, 2.0]
    started = [b for b in bus if b.name == "llm.call_started"]
    assert [b.attempt_id for b in started] == [f"op-r1:attempt_{n}" for n in (1, 2, 3)]
    assert {b.operation_id for b in started} == {"op-r1"}
    failed = [b for b in bus if b.name == "llm.call_failed"]
    assert [(b.error_class, b.retry_count) for b in failed] == [("server_error", 0), ("server_error", 1)]


async def test_retry_after_is_honoured_instead_of_backoff(autojump_clock):
    runner = make_runner()
    await runner.run(job({"error": {"error_class": "rate_limit", "retry_after": 7, "attempts": 1}}, {"text": "ok"}))
    events, bus = drain(runner)
    assert type(events[-1]) is Finish
    assert trio.current_time() == pytest.approx(7.0)
    limited = [b for b in bus if b.name == "llm.rate_limited"]
    assert len(limited) == 1 and limited[0].wait_s == 7


async def test_retry_after_past_the_cap_is_not_waited(autojump_clock):
    runner = make_runner()
    await runner.run(job({"error": {"error_class": "rate_limit", "retry_after": 61, "attempts": 1}}, {"text": "ok"}))
    events, _ = drain(runner)
    assert trio.current_time() == 0
    assert type(events[-1]) is ErrorEvent and "exceeds the cap of 60s" in events[-1].error.message
    assert events[-1].error.retry_after_s == 61


async def test_gives_up_after_max_retries(autojump_clock):
    runner = make_runner()
    await runner.run(job({"error": {"error_class": "network"}}))
    events, bus = drain(runner)
    assert [type(e) for e in events] == [ErrorEvent]  # failed before anything streamed
    assert events[0].error.error_class == "network" and events[0].error.retryable
    assert "gave up after 3 attempts" in events[0].error.message
    assert sum(b.name == "llm.call_started" for b in bus) == 3
    assert trio.current_time() == pytest.approx(3.0)


async def test_request_max_retries_overrides_the_policy(autojump_clock):
    runner = make_runner()
    await runner.run(job({"error": {"error_class": "network"}}, max_retries=0))
    _, bus = drain(runner)
    assert sum(b.name == "llm.call_started" for b in bus) == 1


@pytest.mark.parametrize(
    "error_class",
    ["authentication", "invalid_request", "context_length", "content_filter", "quota_exceeded", "not_found"],
)
async def test_non_retryable_classes_are_not_retried(autojump_clock, error_class):
    runner = make_runner()
    await runner.run(job({"error": {"error_class": error_class}}))
    events, bus = drain(runner)
    assert events[-1].error.error_class == error_class and not events[-1].error.retryable
    assert sum(b.name == "llm.call_started" for b in bus) == 1


async def test_a_stream_is_not_retried_once_events_went_out(autojump_clock):
    runner = make_runner()
    await runner.run(job({"text": "half"}, {"error": {"error_class": "server_error"}}))
    events, bus = drain(runner)
    check_invariants(events)
    assert events[-1].partial.text == "half" and "not retried" in events[-1].error.message
    assert sum(b.name == "llm.call_started" for b in bus) == 1


async def test_stream_idle_timeout(autojump_clock):
    runner = make_runner(policy=RetryPolicy(max_retries=0), timeouts=TimeoutPolicy(stream_idle_s=5))
    await runner.run(job({"text": "a"}, {"stall": True}))
    events, _ = drain(runner)
    check_invariants(events)
    assert events[-1].error.error_class == "timeout" and "5s" in events[-1].error.message
    assert trio.current_time() == pytest.approx(5.0)


async def test_request_deadline_covers_all_attempts(autojump_clock):
    runner = make_runner()
    await runner.run(job({"delay": 100}, {"text": "late"}, timeouts=Timeouts(request_s=30, stream_idle_s=1000)))
    events, _ = drain(runner)
    assert events[-1].error.error_class == "timeout" and "30s deadline" in events[-1].error.message
    assert trio.current_time() == pytest.approx(30.0)


async def test_cancel_closes_open_parts_and_the_upstream(autojump_clock):
    runner = make_runner()
    steps = [{"text": f"w{i} ", "delay": 1} for i in range(10)]
    steps.insert(3, {"tool_call": {"name": "f", "arguments": '{"a": 1, "b": 2}', "chunks": 6, "fragment_delay": 1}})
    async with trio.open_nursery() as nursery:
        nursery.start_soon(runner.run, job(*steps))
        await trio.sleep(5.5)  # three words, then inside the tool call's fragments
        assert runner.cancel("r1")
    events, bus = drain(runner)
    check_invariants(events)
    last = events[-1]
    assert type(last) is Finish and last.response.finish_reason.reason == "cancelled"
    assert last.response.text == "w0 w1 w2 " and last.response.tool_calls[0].arguments == {}
    cancelled = [b for b in bus if b.name == "llm.call_cancelled"]
    assert len(cancelled) == 1 and cancelled[0].detail == "upstream closed"
    assert not runner.cancel("r1")


async def test_stream_complete_and_accumulator_agree():
    """The mock's conformance: the same script streamed, completed and re-accumulated."""
    from trunkline.protocol.accumulate import StreamAccumulator

    script = (
        {"reasoning": "hmm "},
        {"reasoning": "ok"},
        {"signature": "s"},
        {"redacted": "xyz"},
        {"text": "Hi "},
        {"text": "there"},
        {"tool_call": {"name": "f", "arguments": {"x": [1, 2]}, "id": "call_1"}},
        {"tool_call": {"name": "g", "arguments": "", "id": "call_2"}},
        {"usage": {"input_tokens": 5, "output_tokens": 9, "reasoning_tokens": 3}},
        {"finish": "tool_calls"},
    )
    runner = make_runner()
    await runner.run(job(*script, rid="s"))
    await runner.run(job(*script, rid="c", stream=False))
    events, _ = drain(runner)
    streamed = [e for e in events if e.request_id == "s"]
    completed = [e for e in events if e.request_id == "c"]
    check_invariants(streamed)
    assert len(completed) == 1 and type(completed[0]) is Finish
    acc = StreamAccumulator("mock")
    for ev in streamed[:-1]:
        acc.feed(ev)
    a, b, c = streamed[-1].response, completed[0].response, acc.response()

    def shape(response):
        return [
            (
                type(p).__name__,
                getattr(p, "text", None),
                getattr(p, "signature", None),
                getattr(p, "data", None),
                getattr(p, "name", None),
                getattr(p, "arguments", None),
                getattr(p, "provider_id", None),
                getattr(p, "provider", None),
            )
            for p in response.message.content
        ]

    assert shape(a) == shape(b) == shape(c)
    assert a.tool_calls[1].arguments == {}
    assert a.usage == b.usage and a.finish_reason == b.finish_reason
    assert a.cost_usd == b.cost_usd == pytest.approx((5 * 1.0 + 9 * 2.0) / 1e6)


async def test_echo_honours_max_tokens_and_stop_sequences():
    runner = make_runner()
    await runner.run(job(rid="len", max_tokens=1))
    request = Request(model="mock:echo", messages=[Message.user("alpha beta STOP gamma")], stop_sequences=["STOP"])
    await runner.run(Job(request_id="stop", client_id="c", request=request, model=MODEL, operation_id="o"))
    events, _ = drain(runner)
    length = [e for e in events if e.request_id == "len"][-1].response
    stop = [e for e in events if e.request_id == "stop"][-1].response
    assert length.text == "hello " and length.finish_reason.reason == "length"
    assert stop.text == "alpha beta " and stop.finish_reason.stop_sequence == "STOP"


def test_backoff_is_capped_and_jittered():
    policy = RetryPolicy(base_delay_s=1, multiplier=2, max_delay_s=10, jitter=0.5)
    rng = random.Random(7)
    for n in range(1, 12):
        delay = backoff_delay(policy, n, rng)
        base = min(2 ** (n - 1), 10)
        assert base * 0.5 <= delay <= min(base * 1.5, 10)
    assert backoff_delay(RetryPolicy(jitter=0), 20) == 60


def test_decide_respects_the_deadline():
    err = ProviderError("server_error", "x")
    assert decide(err, 0, POLICY, time_left_s=0.5).retry is False
    assert decide(err, 0, POLICY, time_left_s=5).wait_s == 1.0


def test_tool_id_map_survives_a_restart_and_stays_bounded(tmp_path):
    path = tmp_path / "ids.sqlite3"
    first = ToolIdMap(path)
    canonical = first.canonical_for("toolu_abc", "s1")
    assert canonical.startswith("tu_") and first.canonical_for("toolu_abc", "s1") == canonical
    minted = first.provider_id_for("tu_foreign", "s1", lambda c: "call_" + c[-6:])
    first.close()
    again = ToolIdMap(path)
    assert again.provider_id_for(canonical, "s1", lambda c: "never") == "toolu_abc"
    assert again.provider_id_for("tu_foreign", "s1", lambda c: "never") == minted
    again.close()
    small = ToolIdMap(None, capacity=10)
    ids = [small.canonical_for(f"p{i}", None) for i in range(25)]
    assert len(small) <= 10
    assert small.provider_id_for(ids[-1], None, lambda c: "gone") == "p24"  # the newest is kept
    assert small.provider_id_for(ids[0], None, lambda c: "gone") == "gone"  # the oldest was evicted


async def test_event_deltas_are_stamped_in_order():
    runner = make_runner()
    await runner.run(job())
    events, _ = drain(runner)
    assert [e.seq for e in events] == list(range(len(events)))
    assert {e.request_id for e in events} == {"r1"}
    assert "".join(e.text for e in events if type(e) is TextDelta) == "hello world"


async def test_drain_lets_jobs_finish_then_cancels_the_rest(autojump_clock):
    from trunkline.workers._runtime import _drain

    runner = make_runner()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(runner.run, job({"text": "quick", "delay": 1}, rid="fast"))
        nursery.start_soon(runner.run, job({"text": "slow", "delay": 100}, rid="slow"))
        await trio.testing.wait_all_tasks_blocked()  # both jobs are running
        assert set(runner.scopes) == {"fast", "slow"}
        await _drain(runner, grace_s=5)
    events, _ = drain(runner)
    ends = {e.request_id: e for e in events if type(e) is Finish}
    assert ends["fast"].response.finish_reason.reason == "stop"
    assert ends["slow"].response.finish_reason.reason == "cancelled"
    assert trio.current_time() == pytest.approx(5.0)


async def test_a_cancelled_stream_reports_estimated_usage_and_cost(autojump_clock):
    runner = make_runner()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(runner.run, job(*[{"text": "word ", "delay": 1} for _ in range(20)]))
        await trio.sleep(5.5)
        runner.cancel("r1")
    events, _ = drain(runner)
    response = events[-1].response
    assert response.finish_reason.reason == "cancelled" and response.text == "word " * 5
    assert response.usage.estimated and response.usage.input_tokens > 0 and response.usage.output_tokens >= 5
    assert response.usage.estimated_fields == ["input_tokens", "output_tokens", "total_tokens"]
    assert response.cost_usd and response.cost_usd > 0


async def test_idle_timeout_counts_from_the_last_item_within_its_slack(autojump_clock):
    """The idle deadline is pushed lazily: never late, and early by at most IDLE_SLACK."""
    from trunkline.workers._adapter import IDLE_SLACK, consume
    from trunkline.workers.errors import ProviderError

    seen: list[float] = []

    async def items(gaps: list[float]):
        for gap in gaps:
            await trio.sleep(gap)
            yield gap
        await trio.sleep(math.inf)

    # Items 0.9 idle apart never time out; a burst of near-simultaneous items then
    # silence times out one idle period after the burst, give or take the slack.
    gaps = [9.0] * 5 + [0.001] * 50
    start = trio.current_time()
    with pytest.raises(ProviderError, match="stream idle timeout"):
        await consume(items(gaps), 10.0, "fake", lambda item: seen.append(trio.current_time()))
    assert len(seen) == len(gaps)
    silence = trio.current_time() - seen[-1]
    assert 10.0 * (1 - IDLE_SLACK) <= silence <= 10.0
    assert seen[-1] - start == pytest.approx(45.05)


async def test_outbox_sends_an_ended_request_at_once_and_in_order():
    """flush_now sends what is queued without the outbox task: control messages first,
    events in order; consecutive frames of one request travel as one relay, and a run
    of relays as one batch."""
    from trunkline.protocol import codec, link
    from trunkline.protocol.messages import Heartbeat, Relay, RelayBatch

    supervisor_end, worker_end = link.socket_pair()
    async with trio.open_nursery() as nursery:
        worker = link.conn(worker_end, nursery)
        supervisor = link.conn(supervisor_end, nursery)
        outbox = Outbox()
        outbox._conn = worker  # as `run` sets it, but with no task to flush for us
        outbox.push_frames("r1", [b"a", b"b"], 1, False)
        outbox.push(Heartbeat(in_flight=1))
        outbox.push_frames("r1", [b"c"], 2, True)
        outbox.flush_now()
        assert outbox.empty()
        got = []
        with trio.fail_after(10):
            while len(got) < 2:
                got += [codec.decode_from_worker(m) for m in await supervisor.receive()]
        # The heartbeat goes ahead of the events, which keep their order (and, no longer
        # split by it, travel as one relay).
        assert type(got[0]) is Heartbeat and got[0].in_flight == 1
        assert type(got[1]) is Relay and got[1].frames == [b"a", b"b", b"c"] and got[1].terminal

        outbox.push_frames("r2", [b"x"], 0, False)
        outbox.push_frames("", [b"bus"], -1, False)
        outbox.flush_now()
        with trio.fail_after(10):
            (batch,) = [codec.decode_from_worker(m) for m in await supervisor.receive()]
        assert type(batch) is RelayBatch and [r.frames for r in batch.relays] == [[b"x"], [b"bus"]]
        worker.close()
        supervisor.close()


async def test_outbox_waits_for_a_slow_supervisor_and_loses_nothing():
    """A supervisor that stops reading makes the link fill up: the outbox task waits
    (backpressure) and, once the supervisor reads again, everything arrives in order."""
    from trunkline.protocol import codec, link
    from trunkline.protocol.messages import Relay, RelayBatch

    supervisor_end, worker_end = link.socket_pair()
    outbox = Outbox()
    outbox.HIGH_WATER = 64 * 1024  # type: ignore[misc]
    frame = b"f" * 1000
    n = 5000  # 5 MB: far more than the kernel's buffers hold
    async with trio.open_nursery() as nursery:
        worker = link.conn(worker_end, nursery)
        supervisor = link.conn(supervisor_end, nursery)
        nursery.start_soon(outbox.run, worker)
        for seq in range(n):
            outbox.push_frames(f"r{seq % 7}", [frame], seq, False)
            if seq % 100 == 0:
                await trio.sleep(0)  # let the outbox task send (and find the link full)
        with trio.fail_after(10):
            while worker.pending < outbox.HIGH_WATER:
                await trio.sleep(0.001)
        seen: list[int] = []
        with trio.fail_after(20):
            while len(seen) < n:
                for data in await supervisor.receive():
                    msg = codec.decode_from_worker(data)
                    relays = msg.relays if type(msg) is RelayBatch else [msg]
                    for relay in relays:
                        assert type(relay) is Relay and all(f == frame for f in relay.frames)
                        seen.append(relay.last_seq)
        nursery.cancel_scope.cancel()
    assert seen == list(range(n))


# -- retries that do not bill twice ----------------------------------------------------


def test_timeouts_are_retried_only_when_asked():
    err = ProviderError("timeout", "slow")
    decision = decide(err, 0, POLICY)
    assert decision.retry is False and "retry_timeouts" in decision.reason
    opted_in = RetryPolicy(**{**{f: getattr(POLICY, f) for f in POLICY.__struct_fields__}, "retry_timeouts": True})
    assert decide(err, 0, opted_in).retry is True
    sent = ProviderError("timeout", "idle", sent=True)  # the stream went silent after it began
    assert decide(sent, 0, POLICY).retry is False and decide(sent, 0, opted_in).retry is True


def test_an_attempt_the_provider_may_have_billed_is_retried_only_for_a_safe_class():
    for error_class in ("network", "server_error", "model_not_loaded"):
        decision = decide(ProviderError(error_class, "cut", sent=True), 0, POLICY)
        assert decision.retry is False and "may have billed" in decision.reason
        assert decide(ProviderError(error_class, "before sending"), 0, POLICY).retry is True
    assert decide(ProviderError("rate_limit", "overloaded", sent=True), 0, POLICY).retry is True


@pytest.mark.parametrize("error_class", sorted(RETRYABLE))
def test_an_attempt_that_received_output_is_never_retried_whatever_its_class(error_class):
    for sent in (False, True):
        err = ProviderError(error_class, "after some text", sent=sent)
        err.output = True
        decision = decide(
            err, 0, RetryPolicy(**{**{f: getattr(POLICY, f) for f in POLICY.__struct_fields__}, "retry_timeouts": True})
        )
        assert decision.retry is False
        if RETRYABLE[error_class]:
            assert "would bill again" in decision.reason


@pytest.mark.parametrize("error_class", ["rate_limit", "server_error", "network", "model_not_loaded"])
async def test_a_whole_response_is_not_retried_once_output_arrived(autojump_clock, error_class):
    """Nothing reached the client (it asked for one terminal event), but the provider
    had produced text: that is billed, so the request ends with it as the partial."""
    runner = make_runner()
    await runner.run(
        job(
            {"text": "paid for"},
            {"error": {"error_class": error_class, "attempts": 1}},
            {"text": "again"},
            stream=False,
        )
    )
    events, bus = drain(runner)
    assert [type(e) for e in events] == [ErrorEvent]
    assert events[0].error.error_class == error_class and "would bill again" in events[0].error.message
    assert events[0].partial.text == "paid for"
    assert sum(b.name == "llm.call_started" for b in bus) == 1
    assert trio.current_time() == 0


def test_no_retry_says_why_without_counting_attempts_that_never_were():
    off = decide(ProviderError("network", "x"), 0, POLICY, max_retries=0)
    assert off.retry is False and off.reason == "not retried: max_retries is 0"
    held = ProviderError("network", "refused")
    held.hold = ""
    assert decide(held, 0, POLICY) == decide(held, 0, POLICY).__class__(False, reason="")


async def test_with_retries_off_the_error_says_so_plainly(autojump_clock):
    runner = make_runner()
    await runner.run(job({"error": {"error_class": "network"}}, max_retries=0))
    events, _ = drain(runner)
    assert "gave up" not in events[0].error.message and "max_retries is 0" in events[0].error.message


# -- the outbox: control first, and back-pressure instead of unbounded buffering -------


async def test_a_full_outbox_holds_the_stream_reader_not_the_heartbeats():
    """Past HIGH_WATER bytes of waiting events, `consume` stops reading its source until
    the outbox has room again; a heartbeat pushed meanwhile still goes out first, and the
    wait does not count as the provider's silence."""
    from trunkline.protocol import codec, link
    from trunkline.protocol.messages import Heartbeat, Relay, RelayBatch
    from trunkline.workers._adapter import consume

    supervisor_end, worker_end = link.socket_pair()
    outbox = Outbox()
    outbox.HIGH_WATER = 64 * 1024  # type: ignore[misc]
    read = 0

    async def endless():
        nonlocal read
        while True:
            read += 1
            yield b"f" * 1000

    def handle(item: bytes) -> None:
        outbox.push_frames("r1", [item], read, False)

    async with trio.open_nursery() as nursery:
        worker = link.conn(worker_end, nursery)
        supervisor = link.conn(supervisor_end, nursery)
        outbox._conn = worker  # no outbox task yet: nothing leaves, so the outbox fills
        nursery.start_soon(consume, endless(), 0.5, "upstream", handle, outbox)
        with trio.fail_after(10):
            while not outbox.full:
                await trio.sleep(0)
        for _ in range(50):
            await trio.sleep(0)
        held_at = read
        assert held_at <= outbox.HIGH_WATER // 1000 + 2  # the reader waits: no growth without bound
        with trio.move_on_after(1.0):  # twice the idle timeout: no timeout fires while held
            while True:
                await trio.sleep(0.05)
        assert read == held_at
        outbox.push(Heartbeat(in_flight=1))
        nursery.start_soon(outbox.run, worker)
        with trio.fail_after(10):
            first = codec.decode_from_worker((await supervisor.receive())[0])
        assert type(first) is Heartbeat
        with trio.fail_after(10):
            while read < held_at + 200:  # the supervisor reads, so the reader goes on
                for data in await supervisor.receive():
                    msg = codec.decode_from_worker(data)
                    assert type(msg) in (Relay, RelayBatch)
        nursery.cancel_scope.cancel()


# -- events too large for any client -------------------------------------------------


def test_an_event_larger_than_the_daemon_sends_ends_the_request_with_its_bill():
    from trunkline.protocol.messages import Response, StreamStart, TextStart, Usage
    from trunkline.workers._emit import Emitter

    sent = []
    emitter = Emitter(job(), "mock", lambda rid, frames, seq, t: sent.extend(frames), lambda p: p, max_event_bytes=4096)
    emitter.emit(StreamStart(model="echo"))
    emitter.emit(TextStart(index=0))
    emitter.emit(TextDelta(index=0, text="small "))
    emitter.emit(TextDelta(index=0, text="y" * 10_000))
    emitter.finish(Response(usage=Usage(input_tokens=5, output_tokens=7, total_tokens=12)))
    events = [decode_event(split_frame(f)[1]) for f in sent]
    check_invariants(events)
    end = events[-1]
    assert type(end) is ErrorEvent and end.error.error_class == "invalid_response"
    assert "largest event (4096 bytes" in end.error.message
    assert end.partial is not None and end.partial.usage.output_tokens > 0 and end.partial.cost_usd is not None
    assert end.partial.text == "small "  # what was sent; the refused delta is not in it
    assert all(len(f) <= 4096 for f in sent)


def test_a_finish_too_large_only_for_its_raw_body_loses_the_raw_body():
    from trunkline.protocol.messages import Response, TextPart, Usage
    from trunkline.workers._emit import Emitter

    sent = []
    emitter = Emitter(
        job(stream=False), "mock", lambda rid, frames, seq, t: sent.extend(frames), lambda p: p, max_event_bytes=4096
    )
    emitter.complete(
        Response(
            message=Message(role="assistant", content=[TextPart(text="fits")]),
            usage=Usage(input_tokens=5, output_tokens=1, total_tokens=6),
            raw=["r" * 10_000],
        )
    )
    (end,) = [decode_event(split_frame(f)[1]) for f in sent]
    assert type(end) is Finish and end.response.text == "fits" and end.response.raw is None
    assert [w.code for w in end.response.warnings] == ["raw_dropped"]


def test_a_finish_larger_than_the_daemon_sends_keeps_its_usage_and_cost():
    from trunkline.protocol.messages import Response, TextPart, Usage
    from trunkline.workers._emit import Emitter

    sent = []
    emitter = Emitter(
        job(stream=False), "mock", lambda rid, frames, seq, t: sent.extend(frames), lambda p: p, max_event_bytes=4096
    )
    emitter.complete(
        Response(
            message=Message(role="assistant", content=[TextPart(text="z" * 10_000)]),
            usage=Usage(input_tokens=5, output_tokens=2000, total_tokens=2005),
        )
    )
    (end,) = [decode_event(split_frame(f)[1]) for f in sent]
    assert type(end) is ErrorEvent and end.error.error_class == "invalid_response"
    assert end.partial.usage.output_tokens == 2000 and end.partial.cost_usd == pytest.approx(0.004005)
    assert end.partial.text == ""


@pytest.mark.parametrize("request_s", [-1.0, math.nan])
async def test_an_unexpected_failure_fails_that_job_alone(autojump_clock, request_s, caplog):
    """Behind validation, a second wall: a deadline trio refuses (it raises) ends this
    job with class `other` in one log line, and the runner serves the next job."""
    runner = make_runner()
    async with trio.open_nursery() as nursery:  # as the worker runs its jobs
        nursery.start_soon(runner.run, job({"text": "poison"}, rid="bad", timeouts=Timeouts(request_s=request_s)))
        nursery.start_soon(runner.run, job({"text": "fine", "delay": 1.0}, rid="good"))
    events, _ = drain(runner)
    bad = [e for e in events if e.request_id == "bad"]
    good = [e for e in events if e.request_id == "good"]
    assert len(bad) == 1 and type(bad[0]) is ErrorEvent and bad[0].error.error_class == "other"
    check_invariants(good)
    assert good[-1].response.text == "fine"
    lines = [r for r in caplog.records if "bad" in r.getMessage() and r.levelname == "ERROR"]
    assert len(lines) == 1 and lines[0].exc_info is None
    assert not runner.scopes


async def test_the_mock_stops_playing_while_the_outbox_is_full():
    # Like a provider's reader, the mock's playback waits for room in the outbox: a
    # client that does not read must not make the worker buffer a script without bound.
    runner = make_runner()
    runner.outbox.HIGH_WATER = 2_000  # a few events' worth
    steps = [{"text": f"word{i} "} for i in range(200)]
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runner.run, job(*steps))
            await trio.testing.wait_all_tasks_blocked()
            held = runner.outbox._bytes
            waiting, _ = drain(runner)
            # The playback stopped just past the high-water mark, far short of the script.
            assert 0 < len(waiting) < 100 and held > runner.outbox.HIGH_WATER
            runner.outbox._bytes = 0
            runner.outbox._room.set()
            await trio.testing.wait_all_tasks_blocked()
            while runner.outbox._queue:
                more, _ = drain(runner)
                waiting += more
                runner.outbox._bytes = 0
                runner.outbox._room.set()
                await trio.testing.wait_all_tasks_blocked()
    check_invariants(waiting)
    assert type(waiting[-1]) is Finish
    assert "".join(e.text for e in waiting if type(e) is TextDelta) == "".join(s["text"] for s in steps)


def trims_kept(runner: JobRunner) -> list[tuple[float, int]]:
    """When the pool trim ran, and how many idle connections it was told to keep."""
    kept: list[tuple[float, int]] = []

    async def trim_idle(keep: int) -> int:
        kept.append((trio.current_time(), keep))
        return 0

    runner.adapter.trim_idle = trim_idle  # type: ignore[method-assign]
    return kept


async def test_the_pool_keeps_idle_as_many_connections_as_recent_jobs_needed(autojump_clock):
    from trunkline.workers._runtime import TRIM_INTERVAL_S, trim_pool

    runner = make_runner()
    kept = trims_kept(runner)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trim_pool, runner.adapter, runner)
        # A burst of three jobs in the first period, then one job at a time.
        for i in range(3):
            nursery.start_soon(runner.run, job({"text": "x", "delay": 1}, rid=f"burst{i}"))
        await trio.sleep(TRIM_INTERVAL_S * 1.5)
        for i in range(3):
            await runner.run(job({"text": "x", "delay": 1}, rid=f"one{i}"))
            await trio.sleep(TRIM_INTERVAL_S)
        nursery.cancel_scope.cancel()
    # The burst's need is kept for two periods, then only what one job at a time needs.
    assert [keep for _, keep in kept][:4] == [3, 3, 1, 1]


async def test_many_jobs_after_a_burst_trim_the_pool_before_the_period_ends(autojump_clock):
    from trunkline.workers._runtime import TRIM_INTERVAL_S, TRIM_JOBS, trim_pool

    runner = make_runner()
    kept = trims_kept(runner)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trim_pool, runner.adapter, runner)
        async with trio.open_nursery() as burst:
            for i in range(3):
                burst.start_soon(runner.run, job({"text": "x"}, rid=f"burst{i}"))
        # Then one job at a time, fast: three windows of TRIM_JOBS jobs, no time passing.
        for i in range(3 * TRIM_JOBS):
            await runner.run(job({"text": "x"}, rid=f"one{i}"))
            await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    # The window that held the burst is kept once more, then only one job's need.
    assert [keep for _, keep in kept] == [3, 3, 1]
    assert all(at < TRIM_INTERVAL_S for at, _ in kept)


async def test_attempt_start_and_completion_are_sent_only_while_the_supervisor_wants_them():
    runner = make_runner()
    runner.call_events = False  # no client watches the bus, and no span counts attempts
    await runner.run(job({"text": "one"}, rid="quiet"))
    events, bus = drain(runner)
    assert [type(e) for e in events][-1] is Finish and bus == []
    runner.call_events = True
    await runner.run(job({"text": "two"}, rid="heard"))
    _, bus = drain(runner)
    assert [(b.name, b.request_id) for b in bus] == [("llm.call_started", "heard"), ("llm.call_completed", "heard")]
