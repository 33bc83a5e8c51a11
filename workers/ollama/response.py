"""Ollama /api/chat answers in canonical form, for the stream translator: finish reasons,
usage, tool-call arguments and error lines. Pure.

A whole answer (one object, `stream: false` or a server that buffers) is one NDJSON
line: the worker reads it through the stream translator like any other."""

from __future__ import annotations

import json
from typing import Any

from ...protocol.messages import (
    FinishReason,
    FinishReasonName,
    Usage,
)
from ...protocol.tokens import estimate_text_tokens
from ..errors import ProviderError

_DONE: dict[str, FinishReasonName] = {"stop": "stop", "length": "length"}


def finish_reason(done_reason: str | None, made_tool_calls: bool) -> FinishReason:
    # Ollama says "stop" after tool calls too; the calls are what matter to a caller.
    if made_tool_calls and done_reason in (None, "stop"):
        return FinishReason(reason="tool_calls", raw=done_reason)
    return FinishReason(reason=_DONE.get(done_reason or "", "other"), raw=done_reason)


def usage(line: dict[str, Any], thinking: str = "") -> Usage | None:
    """The final line's counts. `prompt_eval_cached_count` (Ollama 0.12 and later) is the
    part of the prompt found in the KV cache; `eval_count` counts the thinking too, which
    Ollama does not count apart, so its share is estimated from the text, and says so."""
    if "prompt_eval_count" not in line and "eval_count" not in line:
        return None
    prompt = int(line.get("prompt_eval_count") or 0)
    output = int(line.get("eval_count") or 0)
    cached = min(int(line.get("prompt_eval_cached_count") or 0), prompt)
    result = Usage(input_tokens=prompt, output_tokens=output, total_tokens=prompt + output, cache_read_tokens=cached)
    if not thinking:
        return result
    result.reasoning_tokens = min(estimate_text_tokens(thinking), output) if output else estimate_text_tokens(thinking)
    return result.mark_estimated("reasoning_tokens")


def call_arguments(function: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """Ollama sends arguments as an object (some builds as a JSON string); arguments that
    are not an object give None, with the raw text kept."""
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        raw = arguments
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return None, raw
        if not isinstance(arguments, dict):
            return None, raw
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None, json.dumps(arguments, ensure_ascii=False)
    return arguments, json.dumps(arguments, ensure_ascii=False)


def check_error(line: dict[str, Any]) -> None:
    if "error" in line:
        raise ProviderError("server_error", f"Ollama: {line['error']}")
