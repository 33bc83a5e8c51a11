"""`on_retry`: the caller's hook, told of each retry the worker makes for a request.

Retries happen in the worker (the client only sees the request's one outcome), and the
worker announces each on the daemon's bus: `llm.call_failed` (the error, its message in
`detail`) and then `llm.retrying` (which retry, the wait before it). A request given
`on_retry` has its route watch those bus events; the hook runs in a task of its own
when `llm.retrying` arrives, so a slow hook never holds the client's event reader. It
is told, it does not decide: the worker waits and retries whatever the hook does.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any, get_args

from .errors import TrunklineError, error_from_info
from .protocol.messages import BusEvent, ErrorClass, ErrorInfo

log = logging.getLogger("trunkline.client")

#: `on_retry(error, attempt, delay)`: `error` the failure being retried (a
#: `TrunklineError` of its class), `attempt` which retry this is (1 for the first),
#: `delay` the seconds the worker waits before it. Sync or async.
OnRetry = Callable[[TrunklineError, int, float], Any]

_CLASSES: dict[str, ErrorClass] = {name: name for name in get_args(ErrorClass)}


class RetryWatcher:
    """A route's `on_bus`: pairs each `llm.retrying` with the failure just before it."""

    def __init__(self, hook: OnRetry, request_id: str, start_soon: Callable[..., None]) -> None:
        self.hook = hook
        self.request_id = request_id
        self._start_soon = start_soon
        self._failed: BusEvent | None = None

    def __call__(self, ev: BusEvent) -> None:
        if ev.name == "llm.call_failed":
            self._failed = ev
        elif ev.name == "llm.retrying":
            failed = self._failed
            name = ev.error_class or (failed.error_class if failed else None) or "other"
            info = ErrorInfo(
                error_class=_CLASSES.get(name, "other"),
                message=(failed.detail if failed is not None else None) or name,
                retryable=True,
                provider=ev.provider,
            )
            error = error_from_info(info, request_id=self.request_id)
            self._start_soon(self._call, error, ev.retry_count or 1, ev.wait_s or 0.0)

    async def _call(self, error: TrunklineError, attempt: int, delay: float) -> None:
        try:
            result = self.hook(error, attempt, delay)
            if inspect.isawaitable(result):
                await result
        except Exception as exc:  # noqa: BLE001 - the caller's hook failing must not end the connection
            log.warning("request %s: on_retry raised %s: %s", self.request_id, type(exc).__name__, exc)


__all__ = ["OnRetry", "RetryWatcher"]
