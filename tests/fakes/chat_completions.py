"""Chat Completions streams for the fake server, built the way OpenAI and the servers that
copy it send them: a first chunk announcing the role with empty content, text and
reasoning in pieces, each tool call's first fragment with its id and name and then its
arguments in pieces (keyed by `index`), `finish_reason` in a chunk of its own, then one
chunk with `choices: []` and the usage, then `data: [DONE]`."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from fakes.upstream import Recorded, Reply


def _chunk(id: str, model: str, delta: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    return {
        "id": id,
        "object": "chat.completion.chunk",
        "created": 1764000000,
        "model": model,
        "system_fingerprint": "fp_fake",
        "choices": choices,
        "usage": None,
    }


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def chunks(
    *,
    id: str,
    model: str,
    text: str = "",
    reasoning: str = "",
    calls: Sequence[tuple[str, str, dict[str, Any]]] = (),  # (id, name, arguments)
    usage: dict[str, Any] | None = None,
    finish: str | None = None,
) -> list[dict[str, Any]]:
    out = [_chunk(id, model, {"role": "assistant", "content": "", "refusal": None})]
    # vLLM and DeepSeek name it reasoning_content (OpenRouter and Ollama: reasoning)
    out += [_chunk(id, model, {"reasoning_content": piece}) for piece in _pieces(reasoning, 9)]
    out += [_chunk(id, model, {"content": piece}) for piece in _pieces(text, 5)]
    for index, (call_id, name, arguments) in enumerate(calls):
        first = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        out.append(_chunk(id, model, {"tool_calls": [first]}))
        for piece in _pieces(json.dumps(arguments), 7):
            out.append(_chunk(id, model, {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
    out.append(_chunk(id, model, {}, finish or ("tool_calls" if calls else "stop")))
    if usage is not None:
        out.append({**_chunk(id, model, None), "usage": usage})
    return out


def sse(payloads: list[dict[str, Any]]) -> str:
    return "".join(f"data: {json.dumps(p, ensure_ascii=False)}\n\n" for p in payloads) + "data: [DONE]\n\n"


def completion(payloads: list[dict[str, Any]]) -> dict[str, Any]:
    """The same answer as one chat completion (`stream: false`)."""
    first = payloads[0]
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in payloads if c["choices"])
    calls: dict[int, dict[str, Any]] = {}
    for c in payloads:
        for fragment in (c["choices"][0]["delta"].get("tool_calls") or []) if c["choices"] else []:
            call = calls.setdefault(
                fragment["index"], {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
            )
            call["id"] = fragment.get("id") or call["id"]
            call["function"]["name"] += fragment["function"].get("name", "")
            call["function"]["arguments"] += fragment["function"].get("arguments", "")
    finish = next(
        c["choices"][0]["finish_reason"] for c in payloads if c["choices"] and c["choices"][0]["finish_reason"]
    )
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    usage = next((c["usage"] for c in payloads if c.get("usage")), None)
    return {
        "id": first["id"],
        "object": "chat.completion",
        "created": first["created"],
        "model": first["model"],
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": usage,
    }


def error(status: int, message: str, kind: str, code: str | None, param: str | None = None, **headers: str) -> Reply:
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return Reply(status, {"content-type": "application/json", **headers}, [json.dumps(body).encode()])


def answering(text: str) -> Callable[[Recorded], Reply]:
    """A healthy server's reply to any request: `text`, streamed or whole as the request asks."""

    def reply(request: Recorded) -> Reply:
        payloads = chunks(
            id="c1", model="m", text=text, usage={"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
        )
        if request.json().get("stream"):
            return Reply.sse(sse(payloads))
        return Reply.json(completion(payloads))

    return reply
