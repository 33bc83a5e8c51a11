"""The mock's I/O: it plays a request's body with its delays, stalls and crashes, and
feeds its messages through the pipeline every provider's stream goes through."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import trio

from ...protocol.messages import ModelInfo, Response
from ...protocol.provider_options import ErrorStep
from .._adapter import Adapter, Call, Emit, consume
from .._contract import Pipeline
from ..errors import ProviderError
from . import errors, playback, request
from .stream import MockStream


def not_found(model: str) -> ProviderError:
    return ProviderError(
        "not_found", f"the mock has no model {model!r} (`trunkline models --provider mock` lists the ones it plays)"
    )


class MockAdapter(Adapter):
    provider_type = "mock"
    build_request = staticmethod(request.build)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.config.options.get("crash_on_start"):
            # A worker that dies as it starts: how tests drive the restart-intensity limit.
            os.kill(os.getpid(), signal.SIGKILL)

    async def stream(self, call: Call, emit: Emit, whole: bool = False) -> Response:
        if not call.model.in_catalog:
            # As a real provider answers a model it does not have (and as `ready` says):
            # a misspelt mock model must not echo as if it were fine.
            raise not_found(call.model.wire_name)
        built = self.build(call, stream=True)
        # The mock's messages are its own, not a provider's body: `raw` stays unset.
        pipeline = Pipeline(MockStream(passthrough=call.request.passthrough), "messages", emit, keep_raw=False)
        # Like a provider's reader, the playback waits while the outbox is full.
        await consume(
            self._play(call, built.body), call.deadlines.stream_idle_s, "the mock", pipeline.feed, call.backlog
        )
        return pipeline.finish(call, self.name)

    async def _play(self, call: Call, body: dict[str, Any]) -> AsyncIterator[bytes]:
        call.upstream_open = True
        try:
            for item in playback.play(body):
                match item:
                    case bytes():
                        yield item
                        await trio.lowlevel.checkpoint()
                    case playback.Pause(seconds=seconds):
                        await trio.sleep(seconds)
                    case ErrorStep():
                        if errors.applies(item, call.attempt):
                            raise errors.classify(item)
                    case playback.Crash():
                        os.kill(os.getpid(), signal.SIGKILL)
        finally:
            call.upstream_open = False

    async def ready(self, model: ModelInfo) -> None:
        if not model.in_catalog:
            raise not_found(model.wire_name)
