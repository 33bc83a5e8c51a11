"""Anthropic's I/O: the Messages endpoint, the models endpoint, rate-limit headers."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx

from ...protocol.messages import ModelInfo, RateLimit, Request, Response
from ...protocol.provider_options import AnthropicOptions
from ...protocol.tokens import estimate_request_tokens
from .._adapter import Call, Emit
from .._http import HttpAdapter
from .._ratelimits import header_int, named
from ..errors import ProviderError, parse_retry_after
from . import errors, request, response
from .stream import AnthropicStream

#: Anthropic prepends a tool-use system prompt of about this many tokens when tools are sent,
#: and a shorter one when extended thinking is on (both read off recorded usage).
TOOL_PROMPT_TOKENS = 346
THINKING_PROMPT_TOKENS = 32


def _until(value: str | None) -> float | None:
    """Seconds from now until an RFC 3339 time."""
    if not value:
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


class AnthropicAdapter(HttpAdapter):
    provider_type = "anthropic"
    build_request = staticmethod(request.build)
    default_base_url = "https://api.anthropic.com"

    def credentials(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    def classify(self, status: int, headers: httpx.Headers, body: bytes) -> ProviderError:
        return errors.classify(status, headers, body)

    def rate_limit(self, headers: httpx.Headers) -> RateLimit | None:
        prefix = "anthropic-ratelimit-"
        found = named(headers, prefix)
        if not found:
            return None
        return RateLimit(
            requests_limit=header_int(found.get(prefix + "requests-limit")),
            requests_remaining=header_int(found.get(prefix + "requests-remaining")),
            requests_reset_s=_until(found.get(prefix + "requests-reset")),
            tokens_limit=header_int(found.get(prefix + "tokens-limit")),
            tokens_remaining=header_int(found.get(prefix + "tokens-remaining")),
            tokens_reset_s=_until(found.get(prefix + "tokens-reset")),
            retry_after_s=parse_retry_after(found),
        )

    async def stream(self, call: Call, emit: Emit, whole: bool = False) -> Response:
        return await self.run_stream(
            call,
            emit,
            whole,
            path="/v1/messages",
            built=self.build(call, stream=True),
            translator=AnthropicStream(passthrough=call.request.passthrough),
            whole_body=lambda body: response.parse(body, include_raw=call.request.include_raw),
        )

    async def ready(self, model: ModelInfo) -> None:
        if not self.api_key:
            raise ProviderError("not_configured", f"no API key: set {self.config.key_hint()}")
        await self.get_json(
            f"/v1/models/{model.wire_name}", {"anthropic-version": request.api_version(self.config.options)}
        )

    def count_tokens(self, req: Request, model: ModelInfo) -> int:
        options = self.read_options(req)
        asked = options.thinking if isinstance(options, AnthropicOptions) and options.thinking else {}
        thinking = (req.reasoning_effort not in (None, "none") and model.reasoning) or (
            asked.get("type") in ("enabled", "adaptive")
        )
        return (
            estimate_request_tokens(req)
            + (TOOL_PROMPT_TOKENS if req.tools else 0)
            + (THINKING_PROMPT_TOKENS if thinking else 0)
        )
