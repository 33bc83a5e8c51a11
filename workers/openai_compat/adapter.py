"""Chat Completions I/O: one instance per configured server, each its own worker."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import httpx

from ...protocol.messages import ModelInfo, RateLimit, Request, Response
from ...protocol.tokens import estimate_request_tokens
from .._adapter import Call, Emit
from .._contract import Built, estimated_usage, generated_text
from .._http import HttpAdapter
from .._ratelimits import openai_rate_limit
from .._warnings import warn
from ..errors import ProviderError
from . import errors, request, response
from .stream import ChatStream

NOT_LOADED = {"not-loaded", "not_loaded", "unloaded", "loading", "unloading"}

log = logging.getLogger("trunkline.worker.openai_compat")

#: Hosts of OpenAI's own Chat Completions (and Azure OpenAI's), which take at most 4 stop
#: sequences; other servers (vLLM, llama.cpp, OpenRouter, Groq...) take more or set no limit.
OPENAI_HOSTS = ("api.openai.com",)
OPENAI_HOST_SUFFIXES = (".openai.azure.com",)
OPENAI_MAX_STOP_SEQUENCES = 4


def instance_options(base_url: str, options: Mapping[str, Any]) -> Mapping[str, Any]:
    """The instance's options with the defaults its host implies (the config's win)."""
    host = httpx.URL(base_url).host if base_url else ""
    if host in OPENAI_HOSTS or host.endswith(OPENAI_HOST_SUFFIXES):
        return {"max_stop_sequences": OPENAI_MAX_STOP_SEQUENCES, **options}
    return options


class OpenAICompatAdapter(HttpAdapter):
    provider_type = "openai_compat"
    build_request = staticmethod(request.build)

    #: Set once this server refused `max_completion_tokens` (older vLLM, TGI, servers that
    #: refuse fields they do not know): from then on this instance sends `max_tokens`.
    legacy_max_tokens = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The options `request.build` reads: the config's, over what the host implies.
        self.instance = instance_options(self.base_url, self.config.options)

    def credentials(self, key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"}

    def classify(self, status: int, headers: httpx.Headers, body: bytes) -> ProviderError:
        return errors.classify(status, headers, body)

    def rate_limit(self, headers: httpx.Headers) -> RateLimit | None:
        return openai_rate_limit(headers)

    def build(self, call: Call, *, stream: bool) -> Built:
        built = self.build_request(
            call.request,
            call.model,
            provider=self.name,
            options=self.options_of(call),
            wire_ids=call.wire_ids,
            stream=stream,
            instance=self.instance,
        )
        call.warnings.extend(w for w in built.warnings if w not in call.warnings)
        if self.legacy_max_tokens and "max_completion_tokens" in built.body:
            built.body["max_tokens"] = built.body.pop("max_completion_tokens")
        return built

    async def stream(self, call: Call, emit: Emit, whole: bool = False) -> Response:
        if not self.base_url:
            raise ProviderError("not_configured", f"provider {self.name} has no base_url")
        built = self.build(call, stream=True)
        try:
            return await self._send_chat(call, emit, whole, built)
        except ProviderError as err:
            # A refusal comes before any output, so nothing was billed or emitted: the
            # same attempt goes again with the field the server takes, once.
            if call.answered or "max_completion_tokens" not in built.body:
                raise
            if not errors.refuses_field(err, "max_completion_tokens"):
                raise
        self.legacy_max_tokens = True
        log.warning(
            "%s refused max_completion_tokens: max_tokens is sent from now on "
            "(set `legacy_max_tokens: true` in its options to skip the refused call)",
            self.name,
        )
        warn(
            call.warnings,
            "unsupported_setting",
            f"{self.name} refused max_completion_tokens; the request was sent again with max_tokens "
            "(and later ones are sent so at once)",
        )
        return await self._send_chat(call, emit, whole, self.build(call, stream=True))

    async def _send_chat(self, call: Call, emit: Emit, whole: bool, built: Built) -> Response:
        return await self.run_stream(
            call,
            emit,
            whole,
            path="/chat/completions",
            built=built,
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
