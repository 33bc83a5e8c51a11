"""Ollama's I/O: /api/chat (NDJSON), and /api/tags + /api/ps for `ready`."""

from __future__ import annotations

from typing import Any

import httpx

from ...protocol.messages import ModelInfo, Response, Usage, WarningInfo
from ...protocol.tokens import estimate_request_tokens, estimate_text_tokens
from .._adapter import Call, Emit
from .._http import HttpAdapter
from .._sse import NdjsonDecoder
from ..errors import ProviderError
from . import errors, request
from .stream import OllamaStream

NOT_RUNNING_HINT = "is Ollama running? Start it with `ollama serve`"


def _same_model(a: str, b: str) -> bool:
    """`llama3.2` and `llama3.2:latest` are the same model."""
    def norm(name: str) -> str:
        return name if ":" in name else name + ":latest"

    return norm(a) == norm(b)


class OllamaAdapter(HttpAdapter):
    provider_type = "ollama"
    default_base_url = "http://127.0.0.1:11434"
    idempotency_header = None  # a local server with no such notion

    def classify(self, status: int, headers: httpx.Headers, body: bytes) -> ProviderError:
        return errors.classify(status, headers, body)

    def _hint(self, err: ProviderError) -> ProviderError:
        if err.error_class == "network" and "cannot connect" in err.message:
            err.message = f"{err.message} ({NOT_RUNNING_HINT})"
            err.args = (err.message,)
        return err

    def _build(self, call: Call, stream: bool) -> request.Built:
        built = request.build(call.request, call.model, provider=self.name, stream=stream)
        call.warnings.extend(w for w in built.warnings if w not in call.warnings)
        return built

    def _estimate(self, call: Call, generated: str) -> Usage:
        warning = WarningInfo(code="usage_estimated", message="Ollama reported no token counts; they are estimated")
        if warning not in call.warnings:
            call.warnings.append(warning)
        prompt, out = estimate_request_tokens(call.request), estimate_text_tokens(generated)
        return Usage(input_tokens=prompt, output_tokens=out, total_tokens=prompt + out).mark_estimated(
            "input_tokens", "output_tokens", "total_tokens")

    async def stream(self, call: Call, emit: Emit, whole: bool = False) -> Response:
        built = self._build(call, stream=True)
        decoder = NdjsonDecoder()
        translator = OllamaStream()
        raw: list[Any] | None = [] if call.request.include_raw else None

        def feed(chunk: bytes) -> None:
            for line in decoder.feed(chunk):
                if raw is not None:
                    raw.append(line.decode("utf-8", "replace"))
                for event in translator.feed(line):
                    emit(event)

        try:
            # Ollama streams NDJSON; one whole JSON object (`application/json`) reads the same way.
            await self.post_stream(call, "/api/chat", built.body, feed, formats=("json",))
        except ProviderError as err:
            raise self._hint(err) from None
        for line in decoder.flush():  # a server that sent one object without a newline
            if raw is not None:
                raw.append(line.decode("utf-8", "replace"))
            for event in translator.feed(line):
                emit(event)
        tail, skeleton, reported = translator.finish()
        for event in tail:
            emit(event)
        if not reported:
            skeleton.usage = self._estimate(call, "".join(translator.generated))
        skeleton.raw = raw
        return skeleton

    async def probe(self) -> str | None:
        reason = await self.probe_path("/api/version")
        return f"{reason} ({NOT_RUNNING_HINT})" if reason and "cannot connect" in reason else reason

    async def ready(self, model: ModelInfo) -> None:
        try:
            tags = await self.get_json("/api/tags")
            running = await self.get_json("/api/ps")
        except ProviderError as err:
            raise self._hint(err) from None
        names = [m.get("name") or m.get("model") or "" for m in (tags.get("models") or [])]
        if not any(_same_model(n, model.wire_name) for n in names):
            raise ProviderError("not_found", f"Ollama has no model {model.wire_name!r} (`ollama pull "
                                f"{model.wire_name}`); it has: {', '.join(names[:10]) or 'none'}")
        loaded = [m.get("name") or m.get("model") or "" for m in (running.get("models") or [])]
        if not any(_same_model(n, model.wire_name) for n in loaded):
            raise ProviderError("model_not_loaded", f"Ollama knows {model.wire_name} but has not loaded it yet "
                                "(the first request loads it)")
