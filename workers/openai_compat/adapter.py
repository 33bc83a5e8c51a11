"""Chat Completions I/O: one instance per configured server, each its own worker."""

from __future__ import annotations

from typing import Any

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
    Usage,
    WarningInfo,
)
from ...protocol.tokens import estimate_request_tokens, estimate_text_tokens
from .._adapter import Call, Emit
from .._http import HttpAdapter
from .._sse import SseDecoder
from .._ratelimits import openai_rate_limit
from ..errors import ProviderError
from . import errors, request, response
from .stream import ChatStream

NOT_LOADED = {"not-loaded", "not_loaded", "unloaded", "loading", "unloading"}


class OpenAICompatAdapter(HttpAdapter):
    provider_type = "openai_compat"

    def auth_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def classify(self, status: int, headers: httpx.Headers, body: bytes) -> ProviderError:
        return errors.classify(status, headers, body)

    def rate_limit(self, headers: httpx.Headers) -> RateLimit | None:
        return openai_rate_limit(headers)

    def _build(self, call: Call, stream: bool) -> request.Built:
        if not self.base_url:
            raise ProviderError("not_configured", f"provider {self.name} has no base_url")
        built = request.build(call.request, call.model, provider=self.name, wire_ids=call.wire_ids,
                              stream=stream, instance=self.config.options)
        call.warnings.extend(w for w in built.warnings if w not in call.warnings)
        return built

    def _estimate(self, call: Call, generated: str) -> Usage:
        """Usage the server did not report, estimated and flagged as such."""
        out = estimate_text_tokens(generated)
        prompt = estimate_request_tokens(call.request)
        warning = WarningInfo(code="usage_estimated", message=f"{self.name} reported no usage; tokens are estimated")
        if warning not in call.warnings:
            call.warnings.append(warning)
        return Usage(input_tokens=prompt, output_tokens=out, total_tokens=prompt + out).mark_estimated(
            "input_tokens", "output_tokens", "total_tokens")

    async def stream(self, call: Call, emit: Emit, whole: bool = False) -> Response:
        built = self._build(call, stream=True)
        decoder = SseDecoder()
        translator = ChatStream(passthrough=call.request.passthrough, provider=self.name)
        raw: list[Any] | None = [] if call.request.include_raw else None
        parsed: list[Response] = []
        received = 0

        def feed(chunk: bytes) -> None:
            nonlocal received
            received += len(chunk)
            for _, data, _, _ in decoder.feed_raw(chunk):
                if raw is not None:
                    raw.append(data.decode("utf-8", "replace"))
                for event in translator.feed(data):
                    emit(event)

        await self.post_stream(call, "/chat/completions", built.body, feed,
                               whole=lambda body: parsed.append(self._whole(call, body)))
        if parsed:
            return self.answered_whole(parsed[0], whole, emit)
        for _, data, _, _ in decoder.flush_raw():
            if raw is not None:
                raw.append(data.decode("utf-8", "replace"))
            for event in translator.feed(data):
                emit(event)
        if not translator.seen and received:
            raise ProviderError("invalid_response", f"{self.name} answered with something that is not an event "
                                f"stream ({received} bytes, no `data:` line)")
        tail, skeleton, reported = translator.finish()
        for event in tail:
            emit(event)
        if not reported:
            skeleton.usage = self._estimate(call, translator.generated())
        skeleton.raw = raw
        return skeleton

    def _whole(self, call: Call, content: bytes) -> Response:
        """A whole JSON response (from a server that does not stream)."""
        try:
            body = msgspec.json.decode(content)
        except msgspec.DecodeError as exc:
            raise ProviderError("invalid_response", f"{self.name} sent a body that is not JSON ({exc}): "
                                f"{content[:200]!r}") from None
        if isinstance(body, dict) and "error" in body and "choices" not in body:
            raise errors.from_body(None, body)
        result, reported = response.parse(body, include_raw=call.request.include_raw)
        if not reported:
            result.usage = self._estimate(call, "".join(
                p.text if isinstance(p, (TextPart, ThinkingPart)) else p.name + (p.raw_arguments or "")
                for p in result.message.content if isinstance(p, (TextPart, ThinkingPart, ToolCallPart))))
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

