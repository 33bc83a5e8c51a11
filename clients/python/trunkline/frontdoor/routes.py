"""Which handler answers which method and path."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from . import anthropic_messages, models, openai_chat
from .app import Exchange
from .targets import Targets

Handler = Callable[[Exchange], Awaitable[None]]


async def _health(exchange: Exchange) -> None:
    await exchange.send_json({"status": "ok"})


def routes() -> dict[tuple[str, str], Handler]:
    chat = openai_chat.ChatCompletions()

    async def chat_completions(exchange: Exchange) -> None:
        await exchange.run(chat)

    messages = anthropic_messages.Messages(Targets())

    return {
        ("GET", "/health"): _health,
        ("GET", "/v1/models"): models.list_models,
        ("POST", "/v1/chat/completions"): chat_completions,
        ("POST", "/v1/messages"): messages.serve,
        ("POST", "/v1/messages/count_tokens"): messages.count_tokens,
    }
