"""The high-level API against the real daemon and the scripted mock: the tool loop's rules,
timeouts, cancellation, the default client, and the blocking versions."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

import trunkline
from trunkline import Client, Message, Tool, tool
from trunkline.errors import InvalidRequestError, ProviderTimeoutError
from trunkline.middleware import CompleteNext, StreamNext
from trunkline.protocol.messages import Request, Response, StreamEvent, TextDelta, ToolCallEnd

pytestmark = pytest.mark.e2e


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_call": {"name": name, "arguments": arguments}}


def turns(*steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Request fields scripting the mock's turns; each turn ends with its finish reason."""
    scripted = []
    for turn in steps:
        finish = "tool_calls" if any("tool_call" in s for s in turn) else "stop"
        scripted.append([*turn, {"usage": {"input_tokens": 10, "output_tokens": 5}}, {"finish": finish}])
    return {"provider_options": {"mock": {"turns": scripted}}}


class Recorder(trunkline.Middleware):
    """Every request the loop sends, as the daemon gets it."""

    def __init__(self) -> None:
        self.requests: list[Any] = []

    async def complete(self, request: Request, call_next: CompleteNext) -> Response:
        self.requests.append(request)
        return await call_next(request)

    async def stream(self, request: Request, call_next: StreamNext) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        async for event in call_next(request):
            yield event


async def test_a_three_round_loop_runs_each_tool_once_and_sends_every_result_back(daemon):
    ran: list[tuple[str, int]] = []

    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        ran.append(("add", a + b))
        return a + b

    script = turns([call("add", a=1, b=2)], [call("add", a=3, b=3)], [call("add", a=6, b=4)], [{"text": "10"}])
    recorder = Recorder()
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, middleware=[recorder]) as client:
            result = await trunkline.generate(
                "mock:echo", "1+2+3+4?", tools=[add], max_tool_rounds=3, client=client, **script
            )
    assert result.text == "10" and result.finish_reason.reason == "stop"
    assert ran == [("add", 3), ("add", 6), ("add", 10)]
    assert len(result.steps) == 4 and len(recorder.requests) == 4
    assert [s.tool_results[0].content for s in result.steps[:3]] == ["3", "6", "10"]
    assert all(not r.is_error for s in result.steps for r in s.tool_results)
    # each continuation carries the whole conversation: user, then (assistant, tool) per round
    assert [m.role for m in recorder.requests[3].messages] == ["user"] + ["assistant", "tool"] * 3
    assert result.total_usage.input_tokens == 40 and result.total_usage.output_tokens == 20
    assert result.total_cost_usd == pytest.approx(sum(s.cost_usd for s in result.steps))
    assert [m.role for m in result.messages][-1] == "assistant"


async def test_max_tool_rounds_bounds_the_loop_and_zero_runs_nothing(daemon):
    ran: list[int] = []

    @tool
    async def ping(n: int) -> str:
        ran.append(n)
        return "pong"

    script = turns([call("ping", n=1)], [call("ping", n=2)], [call("ping", n=3)])
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            one = await trunkline.generate("mock:echo", "go", tools=[ping], client=client, **script)
            assert ran == [1] and len(one.steps) == 2  # default: one round, so two model calls
            assert [c.name for c in one.tool_calls] == ["ping"] and one.tool_results == []
            assert one.finish_reason.reason == "tool_calls"
            ran.clear()
            none = await trunkline.generate("mock:echo", "go", tools=[ping], max_tool_rounds=0, client=client, **script)
    assert ran == [] and len(none.steps) == 1 and none.tool_calls[0].arguments == {"n": 1}


async def test_parallel_calls_run_concurrently_and_return_in_one_continuation(daemon):
    # Each tool waits for the other one to have started: only concurrent execution finishes.
    started = {"a": trio.Event(), "b": trio.Event()}

    @tool
    async def meet(who: str) -> str:
        started[who].set()
        await started["b" if who == "a" else "a"].wait()
        return f"{who} met"

    recorder = Recorder()
    script = turns(
        [call("meet", who="a"), call("meet", who="b"), call("nope"), call("meet", who=5)], [{"text": "done"}]
    )
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, middleware=[recorder]) as client:
            result = await trunkline.generate("mock:echo", "meet", tools=[meet], client=client, **script)
    assert result.text == "done" and len(recorder.requests) == 2
    first = result.steps[0]
    assert [r.tool_call_id for r in first.tool_results] == [c.id for c in first.tool_calls]  # the calls' order
    ok_a, ok_b, unknown, invalid = first.tool_results
    assert (ok_a.content, ok_b.content, ok_a.is_error) == ("a met", "b met", False)
    assert unknown.is_error and "unknown tool 'nope'" in unknown.content and "meet" in unknown.content
    assert invalid.is_error and "who: 5 is not of type 'string'" in invalid.content
    sent = recorder.requests[1].messages
    assert [m.role for m in sent] == ["user", "assistant", "tool", "tool", "tool", "tool"]


async def test_a_tool_that_raises_or_times_out_becomes_an_error_result(daemon):
    @tool
    def broken(x: int) -> str:
        raise RuntimeError("disk on fire")

    @tool(timeout_s=0.2)
    async def slow(x: int) -> str:
        await trio.sleep_forever()
        return "never"

    script = turns([call("broken", x=1), call("slow", x=2)], [{"text": "sorry"}])
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            result = await trunkline.generate("mock:echo", "try", tools=[broken, slow], client=client, **script)
    broke, timed_out = result.steps[0].tool_results
    assert broke.is_error and broke.content == "broken failed: RuntimeError: disk on fire"
    assert timed_out.is_error and "did not finish within 0.2s" in timed_out.content
    assert result.text == "sorry"


async def test_a_passive_tool_ends_the_loop_and_hands_the_calls_back(daemon):
    ran: list[str] = []

    @tool
    def active(q: str) -> str:
        ran.append(q)
        return q

    approve = Tool(name="approve", description="ask a human")
    script = turns([call("active", q="x"), call("approve")], [{"text": "never reached"}])
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            result = await trunkline.generate(
                "mock:echo", "go", tools=[active, approve], max_tool_rounds=5, client=client, **script
            )
    assert ran == [] and len(result.steps) == 1
    assert [c.name for c in result.tool_calls] == ["active", "approve"]


async def test_retries_apply_to_one_step_only(daemon):
    ran: list[int] = []

    @tool
    def count(n: int) -> int:
        ran.append(n)
        return n

    script = turns([call("count", n=1)], [{"text": "ok"}])
    # the second model call fails once with a retryable error; the worker retries that call alone
    script["provider_options"]["mock"]["turns"][1].insert(0, {"error": {"error_class": "server_error", "attempts": 1}})
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            result = await trunkline.generate("mock:echo", "go", tools=[count], client=client, max_retries=2, **script)
    assert result.text == "ok" and ran == [1]


async def test_prompt_and_messages_are_exclusive():
    with pytest.raises(TypeError, match="not both"):
        await trunkline.generate("mock:echo", "a", messages=[Message.user("b")])
    with pytest.raises(TypeError, match="give a prompt or messages"):
        await trunkline.generate("mock:echo")


async def test_cancelling_generate_cancels_the_request_and_the_running_tools(daemon):
    tool_started, tool_cancelled = trio.Event(), trio.Event()

    @tool
    async def wait_forever(x: int) -> str:
        tool_started.set()
        try:
            await trio.sleep_forever()
        finally:
            tool_cancelled.set()
        return ""

    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    lambda: trunkline.generate(
                        "mock:echo", "go", tools=[wait_forever], client=client, **turns([call("wait_forever", x=1)])
                    )
                )
                await tool_started.wait()
                nursery.cancel_scope.cancel()
            assert tool_cancelled.is_set()
            # a model call in flight: the daemon's request ends too
            stalled = {"provider_options": {"mock": {"steps": [{"text": "hi"}, {"stall": True}]}}}
            with trio.move_on_after(0.5):
                await trunkline.generate("mock:echo", "go", client=client, **stalled)
            while (await client.status()).in_flight:
                await trio.sleep(0.05)


async def test_timeouts_bound_the_whole_loop_and_each_step(daemon):
    stalled = {"provider_options": {"mock": {"steps": [{"text": "hi"}, {"stall": True}]}}}
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(ProviderTimeoutError, match=r"timeout_s=0\.3"):
                await trunkline.generate("mock:echo", "go", client=client, timeout_s=0.3, **stalled)
            with pytest.raises(ProviderTimeoutError):
                await trunkline.generate("mock:echo", "go", client=client, step_timeout_s=0.3, **stalled)
            with pytest.raises(ProviderTimeoutError, match=r"timeout_s=0\.3"):
                async with trunkline.stream("mock:echo", "go", client=client, timeout_s=0.3, **stalled) as s:
                    await s.result()


async def test_stream_marks_step_boundaries_and_ends_with_the_same_result(daemon):
    @tool
    def lookup(key: str) -> str:
        return key.upper()

    script = turns([{"text": "Looking up."}, call("lookup", key="a")], [{"text": "Found A."}])
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            events = []
            async with trunkline.stream("mock:echo", "find a", tools=[lookup], client=client, **script) as s:
                async for event in s:
                    events.append(event)
                result = await s.result()
            async with trunkline.stream("mock:echo", "find a", tools=[lookup], client=client, **script) as s:
                text = "".join([t async for t in s.text_stream])
    boundaries = [i for i, e in enumerate(events) if isinstance(e, trunkline.StepFinish)]
    assert len(boundaries) == 1
    boundary = events[boundaries[0]]
    assert boundary.index == 0 and boundary.step.tool_results[0].content == "A"
    assert any(type(e) is ToolCallEnd for e in events[: boundaries[0]])
    assert "".join(e.text for e in events if type(e) is TextDelta) == "Looking up.Found A." == text
    assert result.text == "Found A." and len(result.steps) == 2


async def test_leaving_a_stream_early_cancels_the_request(daemon):
    stalled = {"provider_options": {"mock": {"steps": [{"text": "hi"}, {"stall": True}]}}}
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            async with trunkline.stream("mock:echo", "go", client=client, **stalled) as s:
                async for event in s:
                    if type(event) is TextDelta:
                        break
            while (await client.status()).in_flight:
                await trio.sleep(0.05)


async def test_a_loop_can_continue_on_another_model(daemon):
    @tool
    def note(text: str) -> str:
        return "noted"

    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            first = await trunkline.generate(
                "mock:echo",
                "remember x",
                tools=[note],
                client=client,
                **turns([call("note", text="x")], [{"text": "Noted."}]),
            )
            history = [*first.messages, Message.user("and now?")]
            second = await trunkline.generate("mock:basic", messages=history, client=client)
    assert second.text == "and now?"  # the basic mock echoes; the tool turns were accepted as history


async def test_mock_turns_run_out_with_a_clear_error(daemon):
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            with pytest.raises(InvalidRequestError, match="turns scripts 1 turn"):
                await trunkline.generate(
                    "mock:echo",
                    messages=[Message.user("a"), Message.assistant("b"), Message.user("c")],
                    client=client,
                    **turns([{"text": "x"}]),
                )


async def test_set_default_client_puts_its_middleware_under_the_module_calls(daemon):
    recorder = Recorder()
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, middleware=[recorder]) as client:
            trunkline.set_default_client(client)
            try:
                result = await trunkline.generate("mock:echo", "through the default")
                async with trunkline.stream("mock:echo", "streamed through it") as s:
                    await s.result()
            finally:
                trunkline.set_default_client(None)
    assert result.text == "through the default"
    assert [r.messages[-1].text for r in recorder.requests] == ["through the default", "streamed through it"]


DEFAULT_CLIENT_PROGRAM = textwrap.dedent("""
    import asyncio, sys, threading, trio, trunkline

    barrier = threading.Barrier(2, timeout=10)

    @trunkline.tool
    def both(n: int) -> int:
        barrier.wait()  # the two calls of one turn run side by side, under either loop
        return n

    script = {"mock": {"turns": [[{"tool_call": {"name": "both", "arguments": {"n": 1}}},
                                  {"tool_call": {"name": "both", "arguments": {"n": 2}}}, {"finish": "tool_calls"}],
                                 [{"text": "both ran"}]]}}

    async def main():
        first = await trunkline.generate("mock:echo", "lazy default")
        async with trunkline.stream("mock:echo", "streamed") as s:
            text = "".join([t async for t in s.text_stream])
        looped = await trunkline.generate("mock:echo", "loop", tools=[both], provider_options=script)
        print(first.text, "|", text, "|", looped.text, [r.content for r in looped.steps[0].tool_results])

    if sys.argv[1] == "trio":
        trio.run(main)
    else:
        asyncio.run(main())
    print("exited")
""")


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
async def test_the_default_client_connects_lazily_and_closes_at_exit(daemon, backend):
    env = {"TRUNKLINE_RUNTIME_DIR": str(daemon.runtime_dir)}
    with trio.fail_after(60):
        result = await trio.run_process(
            [sys.executable, "-c", DEFAULT_CLIENT_PROGRAM, backend],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**daemon.env, **env},
        )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().split("\n")[:2] == ["lazy default | streamed | both ran ['1', '2']", "exited"]
    assert result.stderr.decode() == ""


SYNC_PROGRAM = textwrap.dedent("""
    import sys, msgspec
    from trunkline import SyncClient, StepFinish, tool
    from trunkline.protocol.messages import TextDelta

    @tool
    def double(n: int) -> int:
        return 2 * n

    script = {"mock": {"turns": [[{"tool_call": {"name": "double", "arguments": {"n": 21}}},
                                   {"finish": "tool_calls"}], [{"text": '{"answer": 42}'}]]}}

    class Answer(msgspec.Struct):
        answer: int

    with SyncClient(sys.argv[1]) as client:
        result = client.generate("mock:echo", "double 21", tools=[double], provider_options=script)
        obj = client.generate_object("mock:echo", "answer", schema=Answer, tools=[double], provider_options=script)
        events = list(client.stream("mock:echo", "double 21", tools=[double], provider_options=script))
        partials = list(client.stream_object("mock:echo", "answer", schema=Answer, tools=[double],
                                             provider_options=script))
        print(result.text, obj.object, sum(isinstance(e, StepFinish) for e in events), partials[-1])
""")


async def test_the_sync_client_has_the_same_calls(daemon):
    with trio.fail_after(60):
        result = await trio.run_process(
            [sys.executable, "-c", SYNC_PROGRAM, str(daemon.runtime_dir)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().strip() == "{\"answer\": 42} Answer(answer=42) 1 {'answer': 42}"
