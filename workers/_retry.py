"""When to try again, and how long to wait first. Pure: no clock, no I/O.

A failed attempt is retried only if its class is retryable, attempts remain,
nothing has reached the client yet (the caller decides that), and the wait
fits: a `Retry-After` longer than the cap is not waited past, and no wait may
run past the request's overall deadline.

Three rules keep a retry from becoming a second bill. An attempt that received
any output (`ProviderError.output`) is never sent again, whatever the class of
its error: the provider bills what it generated, streamed to the client or
gathered for a whole response alike. A timed-out attempt is not
sent again unless `retry_timeouts` is on: a timeout usually means a slow
generation, which another attempt repeats. And an attempt the provider may
have billed (`ProviderError.sent`: the request reached it and it began to
answer, or the connection failed after the whole body went out) is sent again
only if its class is in `SAFE_AFTER_SEND`: a provider that says it is rate
limited or overloaded before any output has produced nothing to bill.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..config.loader import RetryPolicy
from .errors import ProviderError

#: Classes that mean "nothing was produced" even when the provider had the request.
SAFE_AFTER_SEND = frozenset({"rate_limit"})


@dataclass(frozen=True, slots=True)
class Decision:
    retry: bool
    wait_s: float = 0.0
    reason: str = ""
    from_retry_after: bool = False


def backoff_delay(policy: RetryPolicy, retry_number: int, rng: random.Random | None = None) -> float:
    """The pause before retry `retry_number` (1 for the first retry)."""
    base = policy.base_delay_s * policy.multiplier ** (retry_number - 1)
    base = min(base, policy.max_delay_s)
    if policy.jitter:
        factor = (rng or random).uniform(1.0 - policy.jitter, 1.0 + policy.jitter)
        base *= factor
    return min(base, policy.max_delay_s)


def decide(
    error: ProviderError,
    retries_done: int,
    policy: RetryPolicy,
    *,
    max_retries: int | None = None,
    time_left_s: float | None = None,
    rng: random.Random | None = None,
) -> Decision:
    limit = policy.max_retries if max_retries is None else max_retries
    if not error.retryable:
        return Decision(False, reason=f"{error.error_class} is not retryable")
    if error.hold is not None:
        return Decision(False, reason=error.hold)
    if error.output:
        return Decision(
            False,
            reason="not retried: the provider had already sent part of its answer, which a retry would bill again",
        )
    if limit <= 0:
        return Decision(False, reason="not retried: max_retries is 0")
    if retries_done >= limit:
        return Decision(False, reason=f"gave up after {retries_done + 1} attempts")
    if error.error_class == "timeout" and not policy.retry_timeouts:
        return Decision(False, reason="timeouts are not retried unless retry.retry_timeouts is on")
    if (
        error.sent
        and error.error_class not in SAFE_AFTER_SEND
        and not (error.error_class == "timeout" and policy.retry_timeouts)
    ):
        return Decision(False, reason="not retried: the provider had the request and may have billed it")
    if error.retry_after is not None:
        if error.retry_after > policy.retry_after_cap_s:
            return Decision(
                False,
                reason=f"Retry-After {error.retry_after:g}s exceeds the cap of {policy.retry_after_cap_s:g}s",
            )
        wait, from_header = error.retry_after, True
    else:
        wait, from_header = backoff_delay(policy, retries_done + 1, rng), False
    if time_left_s is not None and wait >= time_left_s:
        return Decision(False, reason=f"waiting {wait:.2f}s would pass the request deadline")
    return Decision(True, wait, from_retry_after=from_header)
