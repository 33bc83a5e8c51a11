"""Chat Completions I/O: one instance per configured server, each its own worker."""

from __future__ import annotations

from typing import Any

import httpx

from ...protocol.messages import ModelInfo, RateLimit, Request, Response
from ...protocol.tokens import estimate_request_tokens
from .._adapter import Call, Emit
from .._contract import estimated_usage, generated_text
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
            whole_body=lambda body: self._completion(call, body),
        )

    def _completion(self, call: Call, body: Any) -> Response:
        """A whole chat completion (from a server that does not stream), its usage estimated
        when the server reports none."""
        result, reported = response.parse(body, include_raw=call.request.include_raw)
        if not reported:
            result.usage = estimated_usage(call, generated_text(result.message.content), self.name)
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
