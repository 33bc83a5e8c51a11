"""Gemini's I/O: generateContent, streamGenerateContent, the model endpoint, countTokens.

The key travels in the `x-goog-api-key` header, never in the URL (URLs end up
in transport error messages and proxies' logs).
"""

from __future__ import annotations

import httpx

from ...protocol.messages import ModelInfo, Request, Response
from .._adapter import Call, Emit
from .._http import HttpAdapter, Leg
from ..errors import ProviderError, invalid_response
from . import errors, request
from .stream import GeminiStream

#: Requests one answer may take when the model continues a long generation (Argon's
#: 1,048,576 tokens in hops of 65,536 is 16; a model that never finishes stops here).
MAX_HOPS = 32


class GeminiAdapter(HttpAdapter):
    provider_type = "gemini"
    build_request = staticmethod(request.build)
    default_base_url = "https://generativelanguage.googleapis.com"
    idempotency_header = None  # Gemini has none; a custom header would only be noise

    def credentials(self, key: str) -> dict[str, str]:
        return {"x-goog-api-key": key}

    def classify(self, status: int, headers: httpx.Headers, body: bytes) -> ProviderError:
        return errors.classify(status, headers, body)

    def _check_key(self) -> None:
        if not self.api_key:
            raise ProviderError("not_configured", f"no API key: set {self.config.key_hint() or 'GEMINI_API_KEY'}")

    async def stream(self, call: Call, emit: Emit, whole: bool = False) -> Response:
        # `whole` needs nothing here: streamGenerateContent always answers with a stream.
        self._check_key()
        built = self.build(call, stream=True)
        translator = GeminiStream(call.model.wire_name, passthrough=call.request.passthrough)
        hops = 1

        def follow(error: ProviderError | None) -> Leg | None:
            # Long decode: the same request with the token; maxOutputTokens is a cumulative budget.
            nonlocal hops
            token = translator.take_continuation() if error is None and hops < MAX_HOPS else None
            if token is None:
                return None
            hops += 1
            return Leg(built.path, {**built.body, "continuationToken": token}, built.headers)

        # streamGenerateContent without alt=sse answers application/json (one JSON array,
        # or one whole object): the pipeline's framing reads both forms and SSE.
        return await self.run_stream(
            call,
            emit,
            whole,
            built=built,
            translator=translator,
            framing="sse_or_json",
            formats=("event-stream", "json"),
            follow=follow,
        )

    async def ready(self, model: ModelInfo) -> None:
        self._check_key()
        await self.get_json(request.model_path(model.wire_name))

    async def count_tokens_exact(self, req: Request, model: ModelInfo) -> int | None:
        """Gemini's own count (`:countTokens`) of everything the request would send: the
        contents, the system instruction and the tools, as one generateContentRequest."""
        if not self.api_key:
            return None
        built = request.build(req, model, provider=self.name, stream=False)
        inner = {k: v for k, v in built.body.items() if k in ("contents", "systemInstruction", "tools", "toolConfig")}
        path = f"{request.model_path(model.wire_name)}:countTokens"
        body = {"generateContentRequest": {"model": f"models/{model.wire_name.removeprefix('models/')}", **inner}}
        reply = await self.post_simple(path, body)
        total = reply.get("totalTokens") if isinstance(reply, dict) else None
        if not isinstance(total, int):
            raise invalid_response(f"{self.name}'s countTokens reply has no totalTokens")
        return total
