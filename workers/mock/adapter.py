"""The mock's I/O: it plays its chunks with their delays, stalls and crashes."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import trio

from ...protocol.accumulate import StreamAccumulator
from ...protocol.messages import ModelInfo, Response
from .._adapter import Adapter, Call, Emit, consume
from ..errors import ProviderError
from . import errors, request, response
from .stream import MockStream


def not_found(model: str) -> ProviderError:
    return ProviderError(
        "not_found", f"the mock has no model {model!r} (`trunkline models --provider mock` lists the ones it plays)"
    )


class MockAdapter(Adapter):
    provider_type = "mock"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.config.options.get("crash_on_start"):
            # A worker that dies as it starts: how tests drive the restart-intensity limit.
            os.kill(os.getpid(), signal.SIGKILL)

    async def _play(self, call: Call) -> AsyncIterator[dict[str, Any]]:
        if not call.model.in_catalog:
            # As a real provider answers a model it does not have (and as `ready` says):
            # a misspelt mock model must not echo as if it were fine.
            raise not_found(call.model.wire_name)
        chunks = request.build(call.request, self.name, call.model.wire_name)
        call.warnings.extend(
            w for w in request.history_warnings(call.request, call.model.wire_name) if w not in call.warnings
        )
        call.upstream_open = True
        try:
            for chunk in chunks:
                kind = chunk["kind"]
                if kind == "delay":
                    await trio.sleep(chunk["seconds"])
                elif kind == "stall":
                    await trio.sleep_forever()
                elif kind == "crash":
                    os.kill(os.getpid(), signal.SIGKILL)
                elif kind == "error":
                    if errors.applies(chunk, call.attempt):
                        raise errors.classify(chunk)
                else:
                    yield chunk
                    await trio.lowlevel.checkpoint()
        finally:
            call.upstream_open = False

    async def stream(self, call: Call, emit: Emit) -> Response:
        translator = MockStream(passthrough=call.request.passthrough)

        def handle(chunk: dict[str, Any]) -> None:
            for event in translator.feed(chunk):
                emit(event)

        # Like a provider's reader, the playback waits while the outbox is full.
        await consume(self._play(call), call.deadlines.stream_idle_s, "the mock", handle, call.backlog)
        ending = translator.finish()
        for event in ending.events:
            emit(event)
        return ending.response

    async def complete(self, call: Call) -> Response:
        collected: list[dict[str, Any]] = []
        # What has played so far, as events, for the progress reports (see Call.gathered).
        translator, call.gathered = MockStream(), StreamAccumulator(self.name)

        def take(chunk: dict[str, Any]) -> None:
            collected.append(chunk)
            for event in translator.feed(chunk):
                call.gathered.feed(event)  # type: ignore[union-attr]
                call.gathered_events += 1

        await consume(self._play(call), call.deadlines.stream_idle_s, "the mock", take)
        return response.parse(collected)

    async def ready(self, model: ModelInfo) -> None:
        if not model.in_catalog:
            raise not_found(model.wire_name)
