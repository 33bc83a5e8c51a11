"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API, through
the canonical form, in front of any provider.

The body becomes a canonical request (`anthropic_request`), for the provider the
model resolves to (`targets`); the answer, whole or streamed, is written in
Anthropic's form (`anthropic_response`); errors are Anthropic's (`errors`), 529 for
an overloaded provider included. `count_tokens` answers `{"input_tokens": n}` from
the daemon's own count of the same request.
"""

from __future__ import annotations

from typing import Any

from ..errors import DaemonUnavailable, TrunklineError
from ..protocol.messages import Response
from .anthropic_request import Translated, betas, check_version, to_request
from .anthropic_response import MessageStream, message_body
from .app import Exchange, Headers, Parsed
from .errors import Family, HttpError, refuse
from .targets import UNKNOWN, Targets


class Messages:
    """POST /v1/messages as the app's `Endpoint`."""

    family: Family = "anthropic"

    def __init__(self, targets: Targets) -> None:
        self.targets = targets

    def translate(self, body: Any, headers: Headers, *, count: bool = False) -> Translated:
        check_version(headers)
        model = body.get("model") if isinstance(body, dict) else None
        target = self.targets.resolve(model) if isinstance(model, str) and model else UNKNOWN
        return to_request(body, target, betas(headers), count=count)

    def parse(self, body: Any, headers: Headers) -> Parsed:
        translated = self.translate(body, headers)
        return Parsed(translated.request, translated.stream, translated.model)

    def whole(self, response: Response, parsed: Parsed) -> Any:
        return message_body(response, parsed.model)

    def streamer(self, parsed: Parsed) -> MessageStream:
        return MessageStream(parsed.model)

    async def serve(self, exchange: Exchange) -> None:
        await self.targets.refresh(exchange.door.client)
        await exchange.run(self)

    async def count_tokens(self, exchange: Exchange) -> None:
        exchange.family = self.family
        body = await exchange.json()
        await self.targets.refresh(exchange.door.client)
        translated = self.translate(body, exchange.headers, count=True)
        try:
            counted = await exchange.door.client.count_tokens(translated.request)
        except TrunklineError as exc:
            raise HttpError(exc.info) from None
        except DaemonUnavailable as exc:
            raise refuse(f"the daemon is not answering: {exc}", "unavailable") from None
        await exchange.send_json({"input_tokens": counted.input_tokens})
