"""Seed 003's remaining client API, through the real daemon and the scripted mock: tool
arguments checked against their schema when the call ends (a warning on the response,
an error result from the loop), `stop_when`, `repair_tool_call`, `on_retry`,
`Response.reasoning` and the stream's `partial_response`."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio

import trunkline
from trunkline import Client, Tool, has_tool_call, step_count_is, tool
from trunkline.errors import RateLimitError, ServerError, TrunklineError
from trunkline.middleware import CompleteNext, StreamNext
from trunkline.protocol.messages import Message, Request, Response, StreamEvent, TextDelta, ToolCallPart

pytestmark = pytest.mark.e2e

AREA_SCHEMA = {
    "type": "object",
    "properties": {"width": {"type": "integer"}, "height": {"type": "integer"}},
    "required": ["width", "height"],
}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_call": {"name": name, "arguments": arguments}}


def turns(*steps: list[dict[str, Any]]) -> dict[str, Any]:
    scripted = []
    for turn in steps:
        finish = "tool_calls" if any("tool_call" in s for s in turn) else "stop"
        scripted.append([*turn, {"usage": {"input_tokens": 10, "output_tokens": 5}}, {"finish": finish}])
    return {"provider_options": {"mock": {"turns": scripted}}}


def steps(*items: dict[str, Any]) -> dict[str, Any]:
    return {"provider_options": {"mock": {"steps": list(items)}}}


class Recorder(trunkline.Middleware):
    """Every request the loop sends, as the daemon gets it."""

    def __init__(self) -> None:
        self.requests: list[Request] = []

    async def complete(self, request: Request, call_next: CompleteNext) -> Response:
        self.requests.append(request)
        return await call_next(request)

    async def stream(self, request: Request, call_next: StreamNext) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        async for event in call_next(request):
            yield event


def off_schema(response: Response) -> list[str]:
    return [w.message for w in response.warnings if w.code == "tool_arguments_invalid"]


# -- tool arguments against the tool's schema ------------------------------------------------


async def test_a_call_off_its_schema_carries_a_warning_streamed_or_not(daemon):
    area = Tool(name="area", parameters=AREA_SCHEMA)  # passive: the daemon alone judges
    script = steps(call("area", width="3", height=2), call("area", width=3, height=2), {"finish": "tool_calls"})
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            whole = await client.complete("mock:echo", "area?", tools=[area], **script)
            async with client.stream("mock:echo", "area?", tools=[area], **script) as s:
                streamed = await s.response()
    for response in (whole, streamed):
        bad, good = response.tool_calls
        (warning,) = off_schema(response)  # one warning: the call that fits has none
        assert bad.id in warning and good.id not in warning
        assert "width: '3' is not of type 'integer'" in warning
        assert bad.arguments == {"width": "3", "height": 2}  # surfaced as the model sent it


async def test_a_schema_the_validator_cannot_use_judges_nothing_and_breaks_nothing(daemon):
    odd = Tool(name="odd", parameters={"type": "object", "properties": {"x": {"type": "no-such-type"}}})
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            response = await client.complete(
                "mock:echo", "x", tools=[odd], **steps(call("odd", x=1), {"finish": "tool_calls"})
            )
            again = await client.complete("mock:echo", "still there?")
    assert response.tool_calls[0].arguments == {"x": 1} and off_schema(response) == []
    assert again.text == "still there?"  # the worker lives on


async def test_a_hostile_schema_cannot_stall_the_worker(daemon):
    """The worker serves every client on one loop: a regular expression that backtracks
    for ages, or anyOfs behind a $ref that grow with the arguments' depth, are not a way
    to stall it (they are not judged there); the caller's own loop still checks patterns."""
    backtracks = Tool(
        name="grep", parameters={"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}}
    )
    keyed = Tool(name="keyed", parameters={"type": "object", "patternProperties": {"^(a+)+$": {"type": "string"}}})
    branching = Tool(
        name="deep",
        parameters={
            "type": "object",
            "properties": {"a": {"anyOf": [{"$ref": "#"}, {"$ref": "#"}, {"$ref": "#"}]}},
            "required": ["a"],
        },
    )
    nested: dict[str, Any] = {}
    for _ in range(40):
        nested = {"a": nested}  # fails only at the bottom: 3**40 paths for a naive check
    script = steps(
        call("grep", s="a" * 40 + "b"),
        {"tool_call": {"name": "keyed", "arguments": {"a" * 40 + "b": 1}}},
        {"tool_call": {"name": "deep", "arguments": nested}},
        {"finish": "tool_calls"},
    )
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            response = await client.complete("mock:echo", "x", tools=[backtracks, keyed, branching], **script)
            assert (await client.complete("mock:echo", "still here")).text == "still here"
    assert len(response.tool_calls) == 3 and off_schema(response) == []

    @tool(parameters={"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}}})
    def airport(code: str) -> str:
        return code

    loop_script = turns([call("airport", code="paris")], [{"text": "ok"}])
    with trio.fail_after(20):
        async with Client(daemon.runtime_dir) as client:
            result = await trunkline.generate("mock:echo", "x", tools=[airport], client=client, **loop_script)
    (refused,) = result.steps[0].tool_results
    assert refused.is_error and "'paris' does not match '^[A-Z]{3}$'" in refused.content


async def test_the_loop_answers_an_off_schema_call_with_an_error_result_naming_the_violation(daemon):
    ran: list[tuple[int, int]] = []

    @tool
    def area(width: int, height: int) -> int:
        ran.append((width, height))
        return width * height

    recorder = Recorder()
    script = turns([call("area", width="3", height=2)], [call("area", width=3, height=2)], [{"text": "6"}])
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, middleware=[recorder]) as client:
            result = await trunkline.generate(
                "mock:echo", "area?", tools=[area], max_tool_rounds=3, client=client, **script
            )
    assert result.text == "6" and ran == [(3, 2)]  # the off-schema call never reached the handler
    first = result.steps[0]
    assert "width: '3' is not of type 'integer'" in off_schema(first.response)[0]
    (bad,) = first.tool_results
    assert bad.is_error and bad.content == "invalid arguments for area: width: '3' is not of type 'integer'"
    # the model is told in the next request, and fixes its call
    (told,) = [p for m in recorder.requests[1].messages if m.role == "tool" for p in m.content]
    assert told.is_error and "width" in told.content
    assert not result.steps[1].tool_results[0].is_error and off_schema(result.steps[1].response) == []


# -- stop_when --------------------------------------------------------------------------------


async def test_stop_when_a_tool_was_called_ends_the_loop_after_its_tools_ran(daemon):
    ran: list[str] = []

    @tool
    def search(q: str) -> str:
        ran.append(f"search {q}")
        return "found"

    @tool
    def final_answer(answer: str) -> str:
        ran.append(f"final {answer}")
        return "noted"

    recorder = Recorder()
    script = turns(
        [call("search", q="a")], [call("final_answer", answer="42")], [call("search", q="never")], [{"text": "x"}]
    )
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, middleware=[recorder]) as client:
            result = await trunkline.generate(
                "mock:echo",
                "go",
                tools=[search, final_answer],
                max_tool_rounds=5,
                stop_when=has_tool_call("final_answer"),
                client=client,
                **script,
            )
    assert ran == ["search a", "final 42"] and len(recorder.requests) == 2 and len(result.steps) == 2
    assert result.stopped and result.finish_reason.reason == "tool_calls"
    assert result.tool_results[0].content == "noted"  # the last step's results are kept...
    assert [m.role for m in result.messages] == ["user", "assistant", "tool", "assistant", "tool"]  # ...to go on from


async def test_stop_when_takes_a_step_count_a_function_of_the_steps_or_a_list(daemon):
    @tool
    def ping(n: int) -> str:
        return "pong"

    script = turns(*[[call("ping", n=i)] for i in range(6)], [{"text": "done"}])
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:

            async def run(stop_when: Any) -> trunkline.GenerateResult:
                return await trunkline.generate(
                    "mock:echo", "go", tools=[ping], max_tool_rounds=10, stop_when=stop_when, client=client, **script
                )

            assert len((await run(step_count_is(2))).steps) == 2
            spent = await run(lambda s: sum(x.usage.output_tokens for x in s) >= 15)
            assert len(spent.steps) == 3 and spent.stopped
            either = await run([step_count_is(5), lambda s: s[-1].tool_calls[0].arguments["n"] == 1])
            assert len(either.steps) == 2
            never = await run(lambda s: False)
    assert len(never.steps) == 7 and never.text == "done" and not never.stopped


async def test_stop_when_applies_to_the_streamed_loop(daemon):
    @tool
    def ping(n: int) -> str:
        return "pong"

    script = turns([call("ping", n=0)], [call("ping", n=1)], [{"text": "done"}])
    with trio.fail_after(30):
        async with (
            Client(daemon.runtime_dir) as client,
            trunkline.stream(
                "mock:echo", "go", tools=[ping], max_tool_rounds=5, stop_when=step_count_is(1), client=client, **script
            ) as s,
        ):
            result = await s.result()
    assert len(result.steps) == 1 and result.stopped and result.tool_results[0].content == "pong"


def test_a_stop_condition_must_be_callable():
    with pytest.raises(TypeError, match="stop_when"):
        trunkline.stream("mock:echo", "x", stop_when=[step_count_is(1), 3])
    with pytest.raises(ValueError, match="1 or more"):
        step_count_is(0)


# -- repair_tool_call -------------------------------------------------------------------------


async def test_repair_tool_call_fixes_a_call_which_then_runs_and_stands_in_the_history(daemon):
    ran: list[tuple[int, int]] = []

    @tool
    def area(width: int, height: int) -> int:
        ran.append((width, height))
        return width * height

    seen: list[tuple[str, str, int]] = []

    async def repair(call: ToolCallPart, error: str, messages: list[Message]) -> ToolCallPart | None:
        seen.append((call.name, error, len(messages)))
        args = {k: int(v) for k, v in (call.arguments or {}).items()}
        return ToolCallPart(id="ignored", name="area", arguments=args)

    recorder = Recorder()
    script = turns([call("area", width="3", height=2), call("Area", width=1, height=1)], [{"text": "6 and 1"}])
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir, middleware=[recorder]) as client:
            result = await trunkline.generate(
                "mock:echo", "area?", tools=[area], repair_tool_call=repair, client=client, **script
            )
    assert sorted(ran) == [(1, 1), (3, 2)] and result.text == "6 and 1"
    assert sorted(seen) == [
        ("Area", "unknown tool 'Area'; the tools available are: area", 2),
        ("area", "invalid arguments for area: width: '3' is not of type 'integer'", 2),
    ]
    first = result.steps[0]
    assert [r.is_error for r in first.tool_results] == [False, False]
    model_ids = [c.id for c in first.response.message.tool_calls]
    assert [r.tool_call_id for r in first.tool_results] == model_ids  # the results answer the model's calls
    # the conversation sent back holds the calls that ran, under the model's ids
    assistant = recorder.requests[1].messages[1]
    assert [(c.id, c.name, c.arguments) for c in assistant.tool_calls] == [
        (model_ids[0], "area", {"width": 3, "height": 2}),
        (model_ids[1], "area", {"width": 1, "height": 1}),
    ]


async def test_a_repair_that_gives_up_fails_or_misses_leaves_an_error_result(daemon):
    @tool
    def area(width: int, height: int) -> int:
        return width * height

    def repair(call: ToolCallPart, error: str) -> ToolCallPart | None:
        if call.arguments == {"width": "give up"}:
            return None
        if call.arguments == {"width": "boom"}:
            raise RuntimeError("repairer broke")
        return ToolCallPart(id=call.id, name="area", arguments={"width": "still text", "height": 1})

    script = turns(
        [call("area", width="give up"), call("area", width="boom"), call("area", width="wrong")], [{"text": "ok"}]
    )
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            result = await trunkline.generate(
                "mock:echo", "area?", tools=[area], repair_tool_call=repair, client=client, **script
            )
    gave_up, failed, missed = result.steps[0].tool_results
    assert gave_up.is_error and gave_up.content.startswith("invalid arguments for area: (arguments): 'height'")
    assert failed.is_error and "repair_tool_call failed: RuntimeError: repairer broke" in failed.content
    assert missed.is_error and "width: 'still text' is not of type 'integer'" in missed.content
    assert missed.content.endswith("(after repair_tool_call)")


# -- on_retry ---------------------------------------------------------------------------------


async def test_on_retry_hears_each_retry_the_worker_makes(daemon):
    flaky = steps(
        {
            "error": {
                "error_class": "rate_limit",
                "status": 429,
                "message": "slow down",
                "retry_after": 0.05,
                "attempts": 2,
            }
        },
        {"text": "finally"},
        {"finish": "stop"},
    )
    heard: list[tuple[type, str, int, float]] = []
    two = trio.Event()

    def on_retry(error: TrunklineError, attempt: int, delay: float) -> None:
        heard.append((type(error), str(error.info.message), attempt, delay))
        if len(heard) == 2:
            two.set()

    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            response = await client.complete("mock:echo", "x", on_retry=on_retry, **flaky)
            await two.wait()
            assert response.text == "finally"
            assert heard == [(RateLimitError, "slow down", 1, 0.05), (RateLimitError, "slow down", 2, 0.05)]

            heard.clear()
            two = trio.Event()
            async with client.stream("mock:echo", "x", on_retry=on_retry, **flaky) as s:
                assert await s.response() == await s.response()
            await two.wait()
            assert [h[2] for h in heard] == [1, 2]

            quiet: list[Any] = []
            await client.complete("mock:echo", "no retry", on_retry=lambda *a: quiet.append(a))
            assert quiet == []


async def test_on_retry_reaches_the_loop_and_a_failing_hook_breaks_nothing(daemon):
    heard = trio.Event()

    async def on_retry(error: TrunklineError, attempt: int, delay: float) -> None:
        heard.set()
        raise RuntimeError("the hook is broken")

    flaky = steps({"error": {"error_class": "server_error", "status": 503, "attempts": 1}}, {"text": "ok"})
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            result = await trunkline.generate("mock:echo", "x", on_retry=on_retry, client=client, **flaky)
            await heard.wait()
            assert result.text == "ok"
            assert (await client.complete("mock:echo", "after")).text == "after"  # the connection lives on


async def test_on_retry_error_classes_follow_the_failure(daemon):
    errors: list[TrunklineError] = []
    done = trio.Event()

    def on_retry(error: TrunklineError, attempt: int, delay: float) -> None:
        errors.append(error)
        done.set()

    flaky = steps({"error": {"error_class": "server_error", "status": 500, "attempts": 1}}, {"text": "ok"})
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            await client.complete("mock:echo", "x", on_retry=on_retry, **flaky)
            await done.wait()
    (error,) = errors
    assert isinstance(error, ServerError) and error.info.retryable and error.info.provider == "mock"


# -- reasoning and partial_response ------------------------------------------------------------


async def test_response_reasoning_is_the_reasoning_text(daemon):
    thinks = steps({"reasoning": "first "}, {"reasoning": "then", "signature": "sig"}, {"text": "answer"})
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            response = await client.complete("mock:echo", "x", **thinks)
            plain = await client.complete("mock:echo", "no thoughts")
            result = await trunkline.generate("mock:echo", "x", client=client, **thinks)
    assert response.text == "answer" and response.reasoning == "first then"
    assert plain.reasoning is None
    assert result.reasoning == result.response.reasoning == result.steps[0].reasoning == "first then"


async def test_partial_response_is_the_response_so_far(daemon):
    gate = steps({"reasoning": "hmm"}, {"text": "one "}, {"text": "two", "delay": 0.01}, {"finish": "stop"})
    with trio.fail_after(30):
        async with Client(daemon.runtime_dir) as client:
            s = client.stream("mock:echo", "x", **gate)
            assert s.partial_response is None  # nothing sent yet
            seen: list[str] = []
            async with s:
                async for event in s:
                    if isinstance(event, TextDelta):
                        partial = s.partial_response
                        assert partial is not None and partial.reasoning == "hmm"
                        seen.append(partial.text)
            assert seen == ["one ", "one two"]
            final = s.partial_response
            assert final is not None and final.text == "one two" and final.finish_reason.reason == "stop"

            loop = trunkline.stream("mock:echo", "x", client=client, **gate)
            assert loop.partial_response is None
            texts: list[str] = []
            async with loop:
                async for event in loop:
                    if isinstance(event, TextDelta):
                        assert loop.partial_response is not None
                        texts.append(loop.partial_response.text)
            assert texts == ["one ", "one two"]


SYNC_HOOKS_PROGRAM = """
import sys, threading
import trunkline
from trunkline import SyncClient
from trunkline.protocol.messages import TextDelta

flaky = {"mock": {"steps": [
    {"error": {"error_class": "rate_limit", "status": 429, "retry_after": 0.05, "attempts": 1}},
    {"text": "one "}, {"text": "two"}]}}
heard = []
told = threading.Event()

def on_retry(error, attempt, delay):
    heard.append((type(error).__name__, attempt, delay))
    told.set()

with SyncClient(sys.argv[1]) as client:
    print("complete:", client.complete("mock:echo", "x", on_retry=on_retry, provider_options=flaky).text)
    print("told:", told.wait(10), heard)
    texts = []
    with client.stream("mock:echo", "x", provider_options=flaky, on_retry=on_retry) as s:
        for event in s:
            if isinstance(event, TextDelta):
                texts.append(s.partial_response.text)
    print("partials:", texts)
    result = client.generate("mock:echo", "x", stop_when=trunkline.step_count_is(1), provider_options=flaky)
    print("generate:", result.text, result.stopped)
"""


async def test_the_blocking_client_takes_the_same_hooks(daemon):
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-c", SYNC_HOOKS_PROGRAM, str(daemon.runtime_dir)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr.decode()
    lines = dict(line.split(": ", 1) for line in done.stdout.decode().splitlines())
    assert lines["complete"] == "one two"
    assert lines["told"] == "True [('RateLimitError', 1, 0.05)]"
    assert lines["partials"] == "['one ', 'one two']"
    assert lines["generate"] == "one two False"  # no tool was called: the loop ended on its own
