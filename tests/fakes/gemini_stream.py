"""Gemini `streamGenerateContent?alt=sse` bodies and error replies for the fake server,
shaped the way Gemini sends them: one candidate per chunk, `usageMetadata` and
`finishReason` on the last, CRLF between events."""

from __future__ import annotations

import json
from typing import Any

from fakes.upstream import Reply


def sse(*payloads: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(p, ensure_ascii=False).encode() + b"\r\n\r\n" for p in payloads)


def chunk(
    *parts: dict[str, Any],
    finish: str | None = None,
    usage: dict[str, int] | None = None,
    model: str = "gemini-3.8-flash",
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    out: dict[str, Any] = {"candidates": [candidate], "modelVersion": model, "responseId": "r1"}
    if usage:
        out["usageMetadata"] = usage
    return out


def error(status: int, name: str, message: str, details: list[Any] | None = None) -> Reply:
    body = {"error": {"code": status, "message": message, "status": name, "details": details or []}}
    return Reply(status, {"content-type": "application/json"}, [json.dumps(body).encode()])
