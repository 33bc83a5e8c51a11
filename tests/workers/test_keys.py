"""A worker with several keys (`keys_env`), in-process with the mock adapter under a mock
clock: the job's key, the move to another key after a 429 or a 401/403, the report
to the supervisor, and a key index the worker does not have."""

from __future__ import annotations

import random

import pytest
import trio

from trunkline.config.loader import ProviderConfig, RetryPolicy, TimeoutPolicy
from trunkline.protocol import codec
from trunkline.protocol.codec import decode_event, split_frame
from trunkline.protocol.messages import BusEvent, ErrorEvent, Finish, Job, KeyFailed, Message, ModelInfo, Request
from trunkline.workers._runtime import JobRunner, Outbox
from trunkline.workers._toolids import ToolIdMap
from trunkline.workers.mock.adapter import MockAdapter

MODEL = ModelInfo(id="mock:echo", provider="mock", wire_name="echo")
POLICY = RetryPolicy(max_retries=2, base_delay_s=1.0, jitter=0.0, retry_after_cap_s=60.0)
KEYS = {"TL_WK_A": "secret-value-of-key-a", "TL_WK_B": "secret-value-of-key-b"}


@pytest.fixture
def runner(monkeypatch) -> JobRunner:
    for name, value in KEYS.items():
        monkeypatch.setenv(name, value)
    config = ProviderConfig(type="mock", keys_env=list(KEYS), key_cooldown_s=30.0)
    adapter = MockAdapter("mock", config, POLICY, TimeoutPolicy(connect_s=10, request_s=600, stream_idle_s=60))
    return JobRunner(adapter, Outbox(), ToolIdMap(None), rng=random.Random(1))


def job(*steps: dict, key_index: int = 0, rid: str = "r1") -> Job:
    request = Request(
        model="mock:echo", messages=[Message.user("hi")], provider_options={"mock": {"steps": list(steps)}}
    )
    return Job(request_id=rid, client_id="c1", request=request, model=MODEL, operation_id=rid, key_index=key_index)


def drain(runner: JobRunner) -> tuple[list, list[BusEvent], list[KeyFailed]]:
    events, bus = [], []
    for item in runner.outbox._queue:
        for frame in item.frames:
            topic, body = split_frame(frame)
            (bus if topic == "bus" else events).append(decode_event(body))
    reports = [codec.decode_from_worker(data) for data in runner.outbox._urgent]
    runner.outbox._queue.clear()
    runner.outbox._urgent.clear()
    return events, bus, [r for r in reports if isinstance(r, KeyFailed)]


def keys_used(bus: list[BusEvent]) -> list[str | None]:
    return [b.detail for b in bus if b.name == "llm.call_started"]


def said(events: list, bus: list[BusEvent]) -> str:
    return repr(events) + repr(bus)


@pytest.mark.parametrize("error_class", ["rate_limit", "authentication", "access_denied"])
async def test_a_key_refused_moves_the_job_to_the_next_key_at_once(runner, autojump_clock, error_class):
    await runner.run(job({"error": {"error_class": error_class, "retry_after": 7, "attempts": 1}}, {"text": "ok"}))
    events, bus, reports = drain(runner)
    assert type(events[-1]) is Finish and events[-1].response.text == "ok"
    assert trio.current_time() == 0  # no wait for key A's Retry-After
    assert keys_used(bus) == ["key TL_WK_A", "key TL_WK_B"]
    assert [(r.key_index, r.error_class) for r in reports] == [(0, error_class)]
    retrying = [b for b in bus if b.name == "llm.retrying"]
    assert [(b.wait_s, b.detail) for b in retrying] == [(0.0, "with key TL_WK_B: TL_WK_A rests")]
    assert not any(value in said(events, bus) for value in KEYS.values())

    # The next job is given key A by a supervisor that has not heard yet: the worker knows A rests.
    await runner.run(job({"text": "again"}, key_index=0, rid="r2"))
    events, bus, _ = drain(runner)
    assert events[-1].response.text == "again" and keys_used(bus) == ["key TL_WK_B"]


async def test_when_every_key_is_rate_limited_the_job_waits_as_a_retry_does(runner, autojump_clock):
    await runner.run(job({"error": {"error_class": "rate_limit", "retry_after": 7, "attempts": 2}}, {"text": "ok"}))
    events, bus, reports = drain(runner)
    assert type(events[-1]) is Finish
    assert [r.key_index for r in reports] == [0, 1]
    assert trio.current_time() == pytest.approx(7.0)  # both keys tried, then key B's Retry-After
    assert keys_used(bus) == ["key TL_WK_A", "key TL_WK_B", "key TL_WK_B"]


async def test_other_failures_keep_the_key(runner, autojump_clock):
    await runner.run(job({"error": {"error_class": "server_error", "status": 503, "attempts": 1}}, {"text": "ok"}))
    events, bus, reports = drain(runner)
    assert type(events[-1]) is Finish and reports == []
    assert keys_used(bus) == ["key TL_WK_A", "key TL_WK_A"]


@pytest.mark.parametrize("index", [2, -1, 99])
async def test_a_key_index_the_worker_does_not_have_is_a_typed_job_error(runner, index):
    await runner.run(job({"text": "never"}, key_index=index))
    events, bus, _ = drain(runner)
    assert [type(e) for e in events] == [ErrorEvent]
    error = events[0].error
    assert error.error_class == "invalid_request" and not error.retryable
    assert f"key_index {index} is out of range: this provider has 2 keys (TL_WK_A, TL_WK_B)" in error.message
    assert not any(b.name == "llm.call_started" for b in bus)  # no provider call


async def test_a_key_whose_variable_is_not_set_is_named_not_used(runner, monkeypatch):
    monkeypatch.delenv("TL_WK_B")
    config = ProviderConfig(type="mock", keys_env=list(KEYS))
    adapter = MockAdapter("mock", config, POLICY, TimeoutPolicy())
    runner = JobRunner(adapter, Outbox(), ToolIdMap(None))
    await runner.run(job({"text": "never"}, key_index=1))
    events, _, _ = drain(runner)
    assert events[0].error.error_class == "not_configured" and "TL_WK_B, is not set" in events[0].error.message
