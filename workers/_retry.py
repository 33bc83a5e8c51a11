"""When to try again, and how long to wait first. Pure: no clock, no I/O.

A failed attempt is retried only if its class is retryable, attempts remain,
nothing has reached the client yet (the caller decides that), and the wait
fits: a `Retry-After` longer than the cap is not waited past, and no wait may
run past the request's overall deadline.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..config.loader import RetryPolicy
from .errors import ProviderError


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
    if retries_done >= limit:
        return Decision(False, reason=f"gave up after {retries_done + 1} attempts")
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
