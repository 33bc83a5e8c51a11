"""Ollama's I/O: /api/chat (NDJSON), and /api/tags + /api/ps for `ready`."""

from __future__ import annotations

import httpx

from ...protocol.messages import ModelInfo, Response
from .._adapter import Call, Emit
from .._http import HttpAdapter
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
    build_request = staticmethod(request.build)
    default_base_url = "http://127.0.0.1:11434"
    idempotency_header = None  # a local server with no such notion

    def classify(self, status: int, headers: httpx.Headers, body: bytes) -> ProviderError:
        return errors.classify(status, headers, body)

    def _hint(self, err: ProviderError) -> ProviderError:
        if err.error_class == "network" and "cannot connect" in err.message:
            err.message = f"{err.message} ({NOT_RUNNING_HINT})"
            err.args = (err.message,)
        return err

    async def stream(self, call: Call, emit: Emit, whole: bool = False) -> Response:
        try:
            # Ollama streams NDJSON; one whole JSON object (`application/json`) reads the same way.
            return await self.run_stream(
                call,
                emit,
                whole,
                path="/api/chat",
                built=self.build(call, stream=True),
                translator=OllamaStream(),
                framing="ndjson",
                formats=("json",),
            )
        except ProviderError as err:
            raise self._hint(err) from None

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
            raise ProviderError(
                "not_found",
                f"Ollama has no model {model.wire_name!r} (`ollama pull "
                f"{model.wire_name}`); it has: {', '.join(names[:10]) or 'none'}",
            )
        loaded = [m.get("name") or m.get("model") or "" for m in (running.get("models") or [])]
        if not any(_same_model(n, model.wire_name) for n in loaded):
            raise ProviderError(
                "model_not_loaded",
                f"Ollama knows {model.wire_name} but has not loaded it yet (the first request loads it)",
            )
