"""`generate` and `stream`: a model call that runs the caller's tools until the model is done.

The loop runs here, in the caller's process (the tools are the caller's
functions); the daemon sees one ordinary request per step, so each step is
retried by the worker on its own (`max_retries`) and a retry never runs the
tools of an earlier step again. When the model asks for N calls in one turn,
all N run concurrently in one task group and their N results go back in one
continuation request. A tool that fails, times out, is unknown or gets
arguments its schema refuses gives the model an error result (`is_error`),
never an exception here.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from .client import Client
from .default_client import get_client
from .errors import ProviderTimeoutError, error_from_info
from .protocol.messages import (
    ErrorInfo,
    Message,
    Response,
    StreamEvent,
    TextDelta,
    Timeouts,
    ToolCallPart,
    WarningInfo,
)
from .response_stream import ResponseStream
from .results import GenerateResult, StepFinish, StepResult
from .retries import OnRetry
from .stop_conditions import StopCondition, as_conditions
from .tools import RepairToolCall, as_tool, is_active, result_messages, run_turn

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .fields import LoopFields


def conversation(prompt: str | Message | None, messages: Sequence[Message] | None, system: str | None) -> list[Message]:
    """The opening messages: exactly one of `prompt` and `messages`, `system` before them."""
    if prompt is not None and messages is not None:
        raise TypeError("give either prompt or messages, not both")
    if prompt is None and messages is None:
        raise TypeError("give a prompt or messages")
    if prompt is not None:
        opening = [prompt if isinstance(prompt, Message) else Message.user(prompt)]
    else:
        opening = list(messages or ())
    return ([Message.system(system)] if system is not None else []) + opening


class ToolLoop:
    """The state of one loop: the conversation so far, its steps, the tools."""

    def __init__(
        self,
        model: str,
        messages: list[Message],
        tools: Sequence[Any],
        max_tool_rounds: int,
        step_timeout_s: float | None,
        fields: Mapping[str, Any],
        stop_when: StopCondition | Sequence[StopCondition] | None = None,
        repair_tool_call: RepairToolCall | None = None,
        on_retry: OnRetry | None = None,
    ) -> None:
        if max_tool_rounds < 0:
            raise ValueError("max_tool_rounds must be 0 or more")
        self.model = model
        self.messages = messages
        self.tools = [as_tool(t) for t in tools]
        self.active = {t.name: t for t in self.tools if is_active(t)}
        self.passive = {t.name for t in self.tools if not is_active(t)}
        self.max_tool_rounds = max_tool_rounds
        self.stop_when = as_conditions(stop_when)
        self.repair_tool_call = repair_tool_call
        self.on_retry = on_retry
        #: True when a `stop_when` condition ended the loop.
        self.stopped = False
        self.steps: list[StepResult] = []
        self.fields = dict(fields)
        if self.tools:
            self.fields["tools"] = self.tools
        if step_timeout_s is not None:
            given = self.fields.get("timeouts")
            timeouts = msgspec.convert(msgspec.to_builtins(given), Timeouts) if given is not None else Timeouts()
            if timeouts.request_s is None:
                timeouts.request_s = step_timeout_s
            self.fields["timeouts"] = timeouts

    async def after(self, response: Response) -> bool:
        """Record a step's response; run its tool calls if the loop goes on. True when
        another step follows."""
        calls = response.tool_calls
        self.messages.append(response.message)
        go_on = (
            bool(calls) and len(self.steps) < self.max_tool_rounds and not any(c.name in self.passive for c in calls)
        )
        if not go_on:
            # Done, out of rounds, or a passive tool's call: the calls go back to the caller.
            passive = any(c.name in self.passive for c in calls)
            if calls and not passive and self.max_tool_rounds > 0:
                # Out of rounds with calls the model still waits for: say so, not a quiet stop.
                names = ", ".join(sorted({c.name for c in calls}))
                response.warnings.append(
                    WarningInfo(
                        code="tool_rounds_exhausted",
                        message=(
                            f"the model asked for {len(calls)} more tool call(s) ({names}) after max_tool_rounds="
                            f"{self.max_tool_rounds} round(s); they were not run: raise max_tool_rounds, or run "
                            "result.tool_calls yourself and continue from result.messages"
                        ),
                    )
                )
            self.steps.append(StepResult(response=response, tool_calls=calls))
            return False
        ran, results = await run_turn(calls, self.active, self.messages, self.repair_tool_call)
        if ran != calls:
            # A repaired call stands in the history in place of the model's, so the
            # conversation sent back holds the call that actually ran.
            fixed = {c.id: c for c in ran}
            message = response.message
            message.content = [fixed.get(p.id, p) if isinstance(p, ToolCallPart) else p for p in message.content]
        self.steps.append(StepResult(response=response, tool_calls=ran, tool_results=results))
        self.messages.extend(result_messages(results))
        if any(condition(self.steps) for condition in self.stop_when):
            # Stopped after the tools ran: their results are in `messages`, ready to go on from.
            self.stopped = True
            return False
        return True

    def result(self) -> GenerateResult:
        return GenerateResult(steps=list(self.steps), messages=list(self.messages), stopped=self.stopped)


def _timeout(timeout_s: float) -> ProviderTimeoutError:
    return ProviderTimeoutError(
        ErrorInfo(
            error_class="timeout",
            message=(f"the call did not finish within timeout_s={timeout_s:g}s (all its steps and tools)"),
        )
    )


async def generate(
    model: str,
    prompt: str | Message | None = None,
    *,
    messages: Sequence[Message] | None = None,
    system: str | None = None,
    tools: Sequence[Any] = (),
    max_tool_rounds: int = 1,
    timeout_s: float | None = None,
    step_timeout_s: float | None = None,
    stop_when: StopCondition | Sequence[StopCondition] | None = None,
    repair_tool_call: RepairToolCall | None = None,
    on_retry: OnRetry | None = None,
    client: Client | None = None,
    **request_fields: Unpack[LoopFields],
) -> GenerateResult:
    """Call `model`, run the active tools it calls (up to `max_tool_rounds` rounds; 0: none),
    and return every step. `timeout_s` bounds the whole loop, `step_timeout_s` each model call;
    `stop_when` (a condition on the steps, or a list) ends the loop after a step whose tools
    ran; `repair_tool_call` may fix a call that cannot run before the model is told;
    `on_retry(error, attempt, delay)` hears of each retry of a step. Other keywords are
    `Request` fields (`max_tokens`, `response_format`, `provider_options`...)."""
    loop = ToolLoop(
        model,
        conversation(prompt, messages, system),
        tools,
        max_tool_rounds,
        step_timeout_s,
        request_fields,
        stop_when,
        repair_tool_call,
        on_retry,
    )
    the_client = await get_client(client)
    try:
        with anyio.fail_after(timeout_s) if timeout_s is not None else anyio.CancelScope():
            while True:
                response = await the_client.complete(model, loop.messages, on_retry=loop.on_retry, **loop.fields)
                if not await loop.after(response):
                    return loop.result()
    except TimeoutError:
        assert timeout_s is not None
        raise _timeout(timeout_s) from None


def stream(
    model: str,
    prompt: str | Message | None = None,
    *,
    messages: Sequence[Message] | None = None,
    system: str | None = None,
    tools: Sequence[Any] = (),
    max_tool_rounds: int = 1,
    timeout_s: float | None = None,
    step_timeout_s: float | None = None,
    stop_when: StopCondition | Sequence[StopCondition] | None = None,
    repair_tool_call: RepairToolCall | None = None,
    on_retry: OnRetry | None = None,
    client: Client | None = None,
    **request_fields: Unpack[LoopFields],
) -> GenerateStream:
    """`generate`, streamed: `async with trunkline.stream(...) as s: async for event in s`.
    Every step's events come in order, a `StepFinish` between two steps (after the
    tools ran); `await s.result()` gives the `GenerateResult`."""
    loop = ToolLoop(
        model,
        conversation(prompt, messages, system),
        tools,
        max_tool_rounds,
        step_timeout_s,
        request_fields,
        stop_when,
        repair_tool_call,
        on_retry,
    )
    return GenerateStream(loop, client, timeout_s)


class GenerateStream:
    """The events of every step of a loop. Leaving the `async with` block early cancels
    the request in flight and any tools running."""

    def __init__(self, loop: ToolLoop, client: Client | None, timeout_s: float | None) -> None:
        self.loop = loop
        self._client = client
        self._timeout_s = timeout_s
        self._deadline: float | None = None
        self._events = self._run()
        self._error: BaseException | None = None
        self._current: ResponseStream | None = None
        self.step = 0  # the index of the step whose events are coming

    async def __aenter__(self) -> GenerateStream:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            await self._events.aclose()

    def __aiter__(self) -> GenerateStream:
        return self

    async def __anext__(self) -> StreamEvent | StepFinish:
        if self._timeout_s is None:
            return await self._events.__anext__()
        if self._deadline is None:
            self._deadline = anyio.current_time() + self._timeout_s
        try:
            with anyio.fail_after(max(self._deadline - anyio.current_time(), 0)):
                return await self._events.__anext__()
        except TimeoutError:
            raise _timeout(self._timeout_s) from None

    async def _run(self) -> AsyncGenerator[StreamEvent | StepFinish, None]:
        client = await get_client(self._client)
        loop = self.loop
        while True:
            async with client.stream(loop.model, loop.messages, on_retry=loop.on_retry, **loop.fields) as step:
                self._current = step
                async for event in step:
                    yield event
            acc = step.accumulator
            if acc.error is not None:
                self._error = error_from_info(acc.error, acc.partial, step.request_id)
                return
            if not await loop.after(acc.response()):
                return
            yield StepFinish(index=self.step, step=loop.steps[-1])
            self.step += 1

    @property
    def partial_response(self) -> Response | None:
        """The response of the step under way, so far (the last step's whole response once
        the loop has ended); None before the first step was sent."""
        if self._current is None:
            return None
        return self._current.partial_response

    @property
    def text_stream(self) -> AsyncIterator[str]:
        """The text of every step, as it arrives."""
        return self._text()

    async def _text(self) -> AsyncIterator[str]:
        async for event in self:
            if isinstance(event, TextDelta):
                yield event.text
        if self._error is not None:
            raise self._error

    async def result(self) -> GenerateResult:
        """Run to the end; the loop's result (or the error that ended it)."""
        async for _ in self:
            pass
        if self._error is not None:
            raise self._error
        return self.loop.result()


__all__ = ["GenerateStream", "ToolLoop", "conversation", "generate", "stream"]
