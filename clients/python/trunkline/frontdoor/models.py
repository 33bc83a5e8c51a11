"""GET /v1/models: the catalog's ids and aliases, in OpenAI's form, or Anthropic's for
a client that sends `anthropic-version`."""

from __future__ import annotations

from typing import Any

from ..protocol.messages import ModelInfo
from .app import Exchange

#: A fixed creation time: the catalog has no date per model, and a changing one would
#: make every listing differ.
CREATED = 1_700_000_000
CREATED_AT = "2023-11-14T22:13:20Z"


def names(models: list[ModelInfo]) -> list[tuple[str, ModelInfo]]:
    """Every name a model answers to: its canonical id, then its aliases (once each)."""
    out: list[tuple[str, ModelInfo]] = []
    seen: set[str] = set()
    for info in models:
        for name in (info.id, *info.aliases):
            if name not in seen:
                seen.add(name)
                out.append((name, info))
    return out


def openai_form(models: list[ModelInfo]) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "created": CREATED, "owned_by": info.provider}
            for name, info in names(models)
        ],
    }


def anthropic_form(models: list[ModelInfo]) -> dict[str, Any]:
    data = [
        {"type": "model", "id": name, "display_name": info.display_name or name, "created_at": CREATED_AT}
        for name, info in names(models)
    ]
    return {
        "data": data,
        "has_more": False,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }


async def list_models(exchange: Exchange) -> None:
    models = [m for m in await exchange.door.client.list_models() if m.configured]
    body = anthropic_form(models) if exchange.family == "anthropic" else openai_form(models)
    await exchange.send_json(body)
