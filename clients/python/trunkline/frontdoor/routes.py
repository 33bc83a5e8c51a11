"""Which handler answers which method and path."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from . import models, openai_chat, openai_responses
from .app import Exchange

Handler = Callable[[Exchange], Awaitable[None]]


async def _health(exchange: Exchange) -> None:
    await exchange.send_json({"status": "ok"})


def routes() -> dict[tuple[str, str], Handler]:
    chat = openai_chat.ChatCompletions()

    async def chat_completions(exchange: Exchange) -> None:
        await exchange.run(chat)

    responses = openai_responses.Responses()

    async def create_response(exchange: Exchange) -> None:
        await exchange.run(responses)

    return {
        ("GET", "/health"): _health,
        ("GET", "/v1/models"): models.list_models,
        ("POST", "/v1/chat/completions"): chat_completions,
        ("POST", "/v1/responses"): create_response,
    }
