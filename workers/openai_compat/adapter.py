"""Chat Completions I/O: one instance per configured server, each its own worker."""

from __future__ import annotations

import httpx
import msgspec

from ...protocol.messages import (
    ModelInfo,
    RateLimit,
    Request,
    Response,
    TextPart,
    ThinkingPart,
    ToolCallPart,
)
from ...protocol.tokens import estimate_request_tokens
from .._adapter import Call, Emit
from .._contract import estimated_usage
from .._http import HttpAdapter
from .._ratelimits import openai_rate_limit
from ..errors import ProviderError
from . import errors, request, response
from .stream import ChatStream

NOT_LOADED = {"not-loaded", "not_loaded", "unloaded", "loading", "unloading"}


class OpenAICompatAdapter(HttpAdapter):
    provider_type = "openai_compat"
    build_request = staticmethod(request.build)

    def auth_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def classify(self, status: int, headers: httpx.Headers, body: bytes) -> ProviderError:
        return errors.classify(status, headers, body)

    def rate_limit(self, headers: httpx.Headers) -> RateLimit | None:
        return openai_rate_limit(headers)

    async def stream(self, call: Call, emit: Emit, whole: bool = False) -> Response:
        if not self.base_url:
            raise ProviderError("not_configured", f"provider {self.name} has no base_url")
        return await self.run_stream(
            call,
            emit,
            whole,
            path="/chat/completions",
            built=self.build(call, stream=True),
            translator=ChatStream(passthrough=call.request.passthrough, provider=self.name),
            parse_whole=lambda body: self._whole(call, body),
        )

    def _whole(self, call: Call, content: bytes) -> Response:
        """A whole JSON response (from a server that does not stream)."""
        try:
            body = msgspec.json.decode(content)
        except msgspec.DecodeError as exc:
            raise ProviderError(
                "invalid_response", f"{self.name} sent a body that is not JSON ({exc}): {content[:200]!r}"
            ) from None
        if isinstance(body, dict) and "error" in body and "choices" not in body:
            raise errors.from_body(None, body)
        result, reported = response.parse(body, include_raw=call.request.include_raw)
        if not reported:
            generated = "".join(
                p.text if isinstance(p, (TextPart, ThinkingPart)) else p.name + (p.raw_arguments or "")
                for p in result.message.content
                if isinstance(p, (TextPart, ThinkingPart, ToolCallPart))
            )
            result.usage = estimated_usage(call, generated, self.name)
        return result

    async def probe(self) -> str | None:
        return await self.probe_path("/models") if self.base_url and self.is_local() else None

    async def ready(self, model: ModelInfo) -> None:
        listing = await self.get_json("/models")
        entries = listing.get("data") if isinstance(listing, dict) else listing
        if not isinstance(entries, list):
            raise ProviderError("invalid_response", f"{self.name}: /models did not list models")
        for entry in entries:
            if isinstance(entry, dict) and entry.get("id") == model.wire_name:
                # LM Studio says `state`, llama.cpp's router `status.value`; vLLM lists only what it serves.
                status = entry.get("status")
                state = entry.get("state") or (status.get("value") if isinstance(status, dict) else None)
                if isinstance(state, str) and state.lower() in NOT_LOADED:
                    raise ProviderError("model_not_loaded", f"{self.name} knows {model.wire_name} but it is {state}")
                return
        known = ", ".join(str(e.get("id")) for e in entries[:10] if isinstance(e, dict))
        raise ProviderError("not_found", f"{self.name} does not serve {model.wire_name!r} (it lists: {known})")

    def count_tokens(self, req: Request, model: ModelInfo) -> int:
        return estimate_request_tokens(req)
