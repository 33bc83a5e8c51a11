"""The mock's server: what it plays for a request's body, made as it is played.

The chunks of a script (or of the echo) come as the wire's messages, between the
pauses, stalls, crashes and scripted errors that the adapter acts out. Nothing
is made ahead: a long prompt's echo must not hold the worker's loop while all of
its words are cut up at once, and a script repeated a million times is never
held whole.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from ...protocol.provider_options import ErrorStep, Step, UsageStep
from ...protocol.tokens import estimate_text_tokens
from . import wire


@dataclass(frozen=True, slots=True)
class Pause:
    """Nothing for `seconds` (`math.inf`: a stall)."""

    seconds: float


class Crash:
    """The worker dies here, as a provider's crash would take it."""


#: What the playback hands the adapter: a message to send, or something to act out.
Item = bytes | Pause | Crash | ErrorStep

_WORDS = re.compile(r"\s*\S+\s*|\s+")


def play(body: dict[str, Any]) -> Iterator[Item]:
    """The items of `body` (`request.build`'s): its `steps`, played `repeat` times, or its `echo`."""
    yield wire.encode(wire.Start(model=body["model"]))
    echo: wire.Echo | None = body.get("echo")
    if echo is not None:
        yield from _steps(_echo(echo), [0])
        return
    steps: list[Step] = body["steps"]
    calls = [0]  # tool calls so far, for the ids of calls the script does not name
    for _ in range(body["repeat"]):
        yield from _steps(steps, calls)


def _echo(echo: wire.Echo) -> Iterator[Step]:
    """`echo.text` word by word, as long as `max_tokens` allows; then usage and the finish."""
    finish = "stop"
    used, end = 0, 0
    for word in _WORDS.finditer(echo.text):
        if echo.max_tokens is not None:
            used += estimate_text_tokens(word.group().strip()) or 1
            if used > echo.max_tokens:
                finish = "length"
                break
        end = word.end()
        yield Step(text=word.group(), delay=echo.delay or None)
    out_tokens = estimate_text_tokens(echo.text[:end])
    yield Step(usage=UsageStep(input_tokens=echo.input_tokens, output_tokens=out_tokens))
    yield Step(finish=finish if echo.stop is None else f"stop_sequence:{echo.stop}")


def _steps(steps: Iterable[Step], calls: list[int]) -> Iterator[Item]:
    send = wire.encode
    for step in steps:
        if step.delay:
            yield Pause(step.delay)
        if step.text is not None:
            yield send(wire.Text(text=step.text))
        if step.reasoning is not None:
            yield send(wire.Reasoning(text=step.reasoning))
        if step.signature is not None:
            yield send(wire.Signature(signature=step.signature))
        if step.redacted is not None:
            yield send(wire.Redacted(data=step.redacted))
        if step.tool_call is not None:
            calls[0] += 1
            call = step.tool_call
            call_id = call.id or f"mockcall_{calls[0]}"
            yield send(wire.ToolStart(id=call_id, name=call.name))
            for fragment in _fragments(call.arguments, call.chunks):
                if call.fragment_delay:
                    yield Pause(call.fragment_delay)
                yield send(wire.ToolArgs(id=call_id, json=fragment))
            if call.hold:
                yield Pause(call.hold)
            yield send(wire.ToolEnd(id=call_id))
        if step.event is not None:
            yield send(wire.ProviderEvent(data=step.event))
        if step.usage is not None:
            yield send(wire.Usage(**msgspec.structs.asdict(step.usage)))
        if step.error is not None:
            yield step.error
        if step.finish is not None:
            yield send(wire.Finish(reason=step.finish))
        if step.stall:
            yield Pause(math.inf)
        if step.crash:
            yield Crash()


def _fragments(arguments: dict[str, Any] | str, n: int) -> list[str]:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments, separators=(",", ":"))
    if not raw:
        return [""]
    n = max(1, min(n, len(raw)))
    size = -(-len(raw) // n)
    return [raw[i : i + size] for i in range(0, len(raw), size)]
