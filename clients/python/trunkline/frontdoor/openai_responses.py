"""POST /v1/responses: OpenAI's Responses API, through the canonical form.

Any model behind it: the body becomes a canonical request
(`openai_responses_request`), the canonical response becomes a response object
(`openai_responses_output`), the canonical events OpenAI's event sequence
(`openai_responses_stream`). Nothing is stored: a conversation travels whole in
`input`, its reasoning sealed in the reasoning items' `encrypted_content`
(`openai_responses_carrier`).
"""

from __future__ import annotations

from typing import Any

from ..protocol.messages import Response
from .app import Headers, Parsed
from .errors import Family
from .openai_responses_output import whole
from .openai_responses_request import translate
from .openai_responses_stream import ResponsesStream


class Responses:
    family: Family = "openai"

    def parse(self, body: Any, headers: Headers) -> Parsed:
        translated = translate(body)
        return Parsed(translated.request, translated.stream, translated.request.model, {"echo": translated.echo})

    def whole(self, response: Response, parsed: Parsed) -> Any:
        return whole(response, parsed.extra["echo"], parsed.model)

    def streamer(self, parsed: Parsed) -> ResponsesStream:
        return ResponsesStream(parsed.extra["echo"], parsed.model)
