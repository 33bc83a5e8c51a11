"""Which handler answers which method and path, and in which API's words its errors
are said (None: as the request's headers suggest)."""

from __future__ import annotations

from . import anthropic_messages, models, openai_chat, openai_responses
from .app import Exchange, Route
from .targets import Targets


async def _health(exchange: Exchange) -> None:
    await exchange.send_json({"status": "ok"})


def routes() -> dict[tuple[str, str], Route]:
    chat = openai_chat.ChatCompletions()
    responses = openai_responses.Responses()
    messages = anthropic_messages.Messages(Targets())

    async def chat_completions(exchange: Exchange) -> None:
        await exchange.run(chat)

    async def create_response(exchange: Exchange) -> None:
        await exchange.run(responses)

    return {
        ("GET", "/health"): Route(_health),
        ("GET", "/v1/models"): Route(models.list_models),
        ("POST", "/v1/chat/completions"): Route(chat_completions, "openai"),
        ("POST", "/v1/responses"): Route(create_response, "openai"),
        ("POST", "/v1/messages"): Route(messages.serve, "anthropic"),
        ("POST", "/v1/messages/count_tokens"): Route(messages.count_tokens, "anthropic"),
    }
