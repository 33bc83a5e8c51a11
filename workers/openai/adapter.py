"""OpenAI Responses I/O: `POST /responses`, `GET /models/{model}`, rate-limit headers.

The default instance reads `OPENAI_BASE_URL` (`base_url_env`, as every provider),
`OPENAI_ORG_ID` and `OPENAI_PROJECT_ID` (through the env-variable names in its
`options`), as OpenAI's own SDKs do; any other instance (a proxy, an Azure-style endpoint)
is one more provider entry with its own `base_url`, key and headers.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import httpx
import msgspec
import trio

from ...config.loader import ProviderConfig
from ...protocol.messages import ModelInfo, RateLimit, Request, Response, WarningInfo
from ...protocol.provider_options import OpenAIOptions
from ...protocol.tokens import estimate_request_tokens
from .._adapter import Call, Emit
from .._http import HttpAdapter, Leg
from .._ratelimits import openai_rate_limit
from ..errors import ProviderError
from . import errors, request, response
from .stream import ResponsesStream

log = logging.getLogger("trunkline.worker.openai")

DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: A background response's stream is picked up again at most this many times.
MAX_RESUMES = 5
#: How long a cancel waits for OpenAI to take the cancel of a background response.
CANCEL_TIMEOUT_S = 5.0
#: A non-streamed background response is polled after this long, then twice as long each time, up to the maximum.
POLL_FIRST_S = 0.25
POLL_MAX_S = 5.0
#: What `POST /responses/input_tokens` takes of a request body (InputTokenCountParams).
COUNT_FIELDS = {
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning",
    "text",
    "truncation",
    "conversation",
    "previous_response_id",
}


def _from_env(config: ProviderConfig) -> ProviderConfig:
    """`config` with what the environment variables named in its options say."""
    options = config.options
    headers = dict(config.headers)
    for option, header in (("organization_env", "OpenAI-Organization"), ("project_env", "OpenAI-Project")):
        value = os.environ.get(options.get(option) or "")
        if value:
            headers[header] = value
    return msgspec.structs.replace(config, headers=headers)


class OpenAIAdapter(HttpAdapter):
    provider_type = "openai"
    build_request = staticmethod(request.build)
    default_base_url = DEFAULT_BASE_URL

    def __init__(self, name: str, config: ProviderConfig, *args: Any, **kwargs: Any) -> None:
        super().__init__(name, _from_env(config), *args, **kwargs)

    def credentials(self, key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"}

    def classify(self, status: int, headers: httpx.Headers, body: bytes) -> ProviderError:
        return errors.classify(status, headers, body)

    def rate_limit(self, headers: httpx.Headers) -> RateLimit | None:
        return openai_rate_limit(headers)

    async def stream(self, call: Call, emit: Emit, whole: bool = False) -> Response:
        built = self.build(call, stream=True)
        translator = ResponsesStream(call.model, passthrough=call.request.passthrough, provider=self.name)
        if not built.body.get("background"):
            return await self.run_stream(
                call,
                emit,
                whole,
                path="/responses",
                built=built,
                translator=translator,
                whole_body=lambda body: response.parse(body, call.model, include_raw=call.request.include_raw),
            )
        try:
            return await self.run_stream(
                call,
                emit,
                whole,
                path="/responses",
                built=built,
                translator=translator,
                follow=_Resume(call, translator),
            )
        except trio.Cancelled:
            if translator.response_id and not translator.done:
                await self._cancel_at_openai(call, translator.response_id)
            raise

    async def _cancel_at_openai(self, call: Call, response_id: str) -> None:
        """Stop a background response we no longer want (it would run, and bill, to the
        end), with the key that made it."""
        with trio.CancelScope(shield=True), trio.move_on_after(CANCEL_TIMEOUT_S):
            try:
                await self.post_simple(f"/responses/{response_id}/cancel", {}, call=call)
            except ProviderError as err:
                log.warning("%s: could not cancel background response %s: %s", self.name, response_id, err.error_class)

    async def complete(self, call: Call) -> Response:
        """A whole response is streamed from OpenAI all the same (see `Adapter.complete`),
        except in background mode, where OpenAI keeps the response and it is polled
        until it has finished."""
        options = self.options_of(call)
        if not (isinstance(options, OpenAIOptions) and options.background):
            return await super().complete(call)
        body, _ = await self.post_json(call, "/responses", self.build(call, stream=False).body)
        body = await self._await_background(call, body)
        return response.parse(body, call.model, include_raw=call.request.include_raw)

    async def _await_background(self, call: Call, body: Any) -> Any:
        """A background response answers `queued` at once: ask again until it has finished."""
        if not isinstance(body, dict) or not body.get("id"):
            return body
        response_id = str(body["id"])
        delay, failures = POLL_FIRST_S, 0
        try:
            while body.get("status") in ("queued", "in_progress"):
                await trio.sleep(delay)
                delay = min(delay * 2, POLL_MAX_S)
                try:
                    call.upstream_open = True
                    body = await self.get_json(f"/responses/{response_id}", call=call)
                except ProviderError as err:
                    failures += 1
                    if err.error_class not in ("network", "timeout", "server_error") or failures > MAX_RESUMES:
                        raise
                finally:
                    call.upstream_open = False
                if not isinstance(body, dict):
                    raise ProviderError(
                        "invalid_response",
                        f"{self.name} answered a poll of {response_id} with something that is not a response",
                    )
        except trio.Cancelled:
            await self._cancel_at_openai(call, response_id)
            raise
        return body

    async def ready(self, model: ModelInfo) -> None:
        if not self.api_key:
            raise ProviderError("not_configured", f"no API key: set {self.config.key_hint()}")
        await self.get_json(f"/models/{model.wire_name}")

    def count_tokens(self, req: Request, model: ModelInfo) -> int:
        return estimate_request_tokens(req)

    async def count_tokens_exact(self, req: Request, model: ModelInfo) -> int | None:
        """OpenAI's own count of the prompt (`POST /responses/input_tokens`, with the fields
        of the body the request would send that the endpoint takes). None without a key; a
        failure (a proxy without the endpoint) raises, and the runtime estimates instead."""
        if not self.api_key:
            return None
        built = request.build(req, model, provider=self.name, stream=False)
        answer = await self.post_simple(
            "/responses/input_tokens", {k: v for k, v in built.body.items() if k in COUNT_FIELDS}
        )
        count = answer.get("input_tokens") if isinstance(answer, dict) else None
        if not isinstance(count, int):
            raise ProviderError("invalid_response", f"{self.name} answered a token count without input_tokens")
        return count


class _Resume:
    """Background mode: a stream that drops (a network error, the idle timeout, or a body
    that ends before `response.completed`) is picked up again after the last event we
    have, at most `MAX_RESUMES` times; the translator skips what it already has."""

    def __init__(self, call: Call, translator: ResponsesStream) -> None:
        self.call = call
        self.translator = translator
        self.resumes = 0

    def __call__(self, error: ProviderError | None) -> Leg | None:
        translator = self.translator
        dropped = "network" if error is None else error.error_class
        if (
            translator.done
            or not translator.response_id
            or dropped not in ("network", "timeout")
            or self.resumes >= MAX_RESUMES
        ):
            return None
        self.resumes += 1
        warning = WarningInfo(
            code="stream_resumed",
            message=f"the connection to OpenAI dropped ({dropped}); the background response was resumed after "
            f"event {translator.last_sequence}",
        )
        if warning not in self.call.warnings:
            self.call.warnings.append(warning)
        after = translator.last_sequence if translator.last_sequence is not None else -1
        return Leg(f"/responses/{translator.response_id}?stream=true&starting_after={after}")
