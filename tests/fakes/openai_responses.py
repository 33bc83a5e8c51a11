"""Responses API streams for the fake server, built the way OpenAI sends them: lifecycle
events, each output item added, its content streamed in pieces, done; usage at the end."""

from __future__ import annotations

import json
from typing import Any

USAGE = {
    "input_tokens": 120,
    "output_tokens": 80,
    "total_tokens": 200,
    "input_tokens_details": {"cached_tokens": 64, "cache_write_tokens": 0},
    "output_tokens_details": {"reasoning_tokens": 48},
}


def pieces(text: str, n: int = 3) -> list[str]:
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def reasoning(id: str, summary: list[str], encrypted: str = "gAAAAB-enc") -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": id,
        "summary": [{"type": "summary_text", "text": s} for s in summary],
        "encrypted_content": encrypted,
    }


def message(id: str, text: str, phase: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {
        "type": "message",
        "id": id,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    if phase:
        item["phase"] = phase
    return item


def function_call(id: str, call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": id,
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


def events(
    items: list[dict[str, Any]],
    *,
    model: str = "gpt-5-2025-08-07",
    usage: dict[str, Any] | None = None,
    status: str = "completed",
    response_id: str = "resp_1",
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def add(payload: dict[str, Any]) -> None:
        payload["sequence_number"] = len(out)
        out.append(payload)

    shell = {"id": response_id, "object": "response", "model": model, "status": "in_progress", "output": []}
    add({"type": "response.created", "response": shell})
    add({"type": "response.in_progress", "response": shell})
    for i, item in enumerate(items):
        where = {"output_index": i, "item_id": item["id"]}
        kind = item["type"]
        started = {**item, "status": "in_progress"}
        if kind == "message":
            started["content"] = []
        elif kind == "reasoning":
            started["summary"] = []
        elif kind == "function_call":
            started["arguments"] = ""
        add({"type": "response.output_item.added", "output_index": i, "item": started})
        if kind == "message":
            text = item["content"][0]["text"]
            add(
                {
                    "type": "response.content_part.added",
                    **where,
                    "content_index": 0,
                    "part": {"type": "output_text", "text": "", "annotations": []},
                }
            )
            for piece in pieces(text):
                add(
                    {
                        "type": "response.output_text.delta",
                        **where,
                        "content_index": 0,
                        "delta": piece,
                        "obfuscation": "xYz",
                    }
                )
            add({"type": "response.output_text.done", **where, "content_index": 0, "text": text})
            add({"type": "response.content_part.done", **where, "content_index": 0, "part": item["content"][0]})
        elif kind == "reasoning":
            for k, summary in enumerate(item["summary"]):
                add(
                    {
                        "type": "response.reasoning_summary_part.added",
                        **where,
                        "summary_index": k,
                        "part": {"type": "summary_text", "text": ""},
                    }
                )
                for piece in pieces(summary["text"]):
                    add({"type": "response.reasoning_summary_text.delta", **where, "summary_index": k, "delta": piece})
                add(
                    {
                        "type": "response.reasoning_summary_text.done",
                        **where,
                        "summary_index": k,
                        "text": summary["text"],
                    }
                )
                add({"type": "response.reasoning_summary_part.done", **where, "summary_index": k, "part": summary})
        elif kind == "function_call":
            for piece in pieces(item["arguments"]):
                add({"type": "response.function_call_arguments.delta", **where, "delta": piece, "obfuscation": "q"})
            add({"type": "response.function_call_arguments.done", **where, "arguments": item["arguments"]})
        add({"type": "response.output_item.done", "output_index": i, "item": item})
    final = {**shell, "status": status, "output": items, "usage": usage or USAGE}
    add({"type": f"response.{'completed' if status == 'completed' else status}", "response": final})
    return out


def sse(payloads: list[dict[str, Any]]) -> bytes:
    return b"".join(f"event: {p['type']}\ndata: {json.dumps(p)}\n\n".encode() for p in payloads)


def body(items: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    """The non-streamed response object for the same items."""
    return events(items, **kwargs)[-1]["response"]
