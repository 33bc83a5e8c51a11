"""Ollama `/api/chat` answers for the fake server, shaped the way Ollama sends them:
NDJSON lines of `message` deltas (`thinking`, then `content`), tool calls whole in one
line (arguments an object, no id), and a last line with `done: true`, `done_reason`,
the durations in nanoseconds and the token counts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fakes.upstream import Reply

CREATED = "2026-11-26T08:00:00.000000Z"


def _line(model: str, message: dict[str, Any], done: bool = False) -> dict[str, Any]:
    return {"model": model, "created_at": CREATED, "message": {"role": "assistant", **message}, "done": done}


def lines(
    *,
    model: str,
    text: str = "",
    thinking: str = "",
    calls: Sequence[tuple[str, dict[str, Any]]] = (),  # (name, arguments)
    prompt_eval_count: int = 0,
    prompt_eval_cached_count: int | None = None,
    eval_count: int = 0,
    done_reason: str = "stop",
) -> list[dict[str, Any]]:
    out = [_line(model, {"content": "", "thinking": thinking[i : i + 9]}) for i in range(0, len(thinking), 9)]
    out += [_line(model, {"content": text[i : i + 5]}) for i in range(0, len(text), 5)]
    if calls:
        tool_calls = [
            {"function": {"index": i, "name": name, "arguments": arguments}}
            for i, (name, arguments) in enumerate(calls)
        ]
        out.append(_line(model, {"content": "", "tool_calls": tool_calls}))
    last = {
        **_line(model, {"content": ""}, done=True),
        "done_reason": done_reason,
        "total_duration": 912_000_000,
        "load_duration": 21_000_000,
        "prompt_eval_count": prompt_eval_count,
        "prompt_eval_duration": 310_000_000,
        "eval_count": eval_count,
        "eval_duration": 580_000_000,
    }
    if prompt_eval_cached_count is not None:
        last["prompt_eval_cached_count"] = prompt_eval_cached_count
    out.append(last)
    return out


def whole(payloads: list[dict[str, Any]]) -> dict[str, Any]:
    """The same answer as one object (`stream: false`)."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(p["message"].get("content", "") for p in payloads),
    }
    thinking = "".join(p["message"].get("thinking", "") for p in payloads)
    if thinking:
        message["thinking"] = thinking
    calls = [c for p in payloads for c in p["message"].get("tool_calls", [])]
    if calls:
        message["tool_calls"] = calls
    return {**payloads[-1], "message": message}


def error(status: int, message: str, **headers: str) -> Reply:
    return Reply.json({"error": message}, status=status, headers=headers)
