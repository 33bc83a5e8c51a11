"""A scripted error step -> ProviderError, as a real provider's errors module maps a response."""

from __future__ import annotations

from typing import get_args

from ...protocol.messages import ErrorClass
from ...protocol.provider_options import ErrorStep
from ..errors import ProviderError

_CLASSES: dict[str, ErrorClass] = {name: name for name in get_args(ErrorClass)}


def classify(step: ErrorStep) -> ProviderError:
    error_class = _CLASSES.get(step.error_class)
    if error_class is None:
        return ProviderError("invalid_request", f"provider_options.mock: unknown error_class {step.error_class!r}")
    return ProviderError(
        error_class,
        step.message,
        status=step.status,
        code=step.code,
        retry_after=step.retry_after,
    )


def applies(step: ErrorStep, attempt: int) -> bool:
    """Whether a scripted error fires on this attempt (`attempts`: only the first N)."""
    return step.attempts is None or attempt <= step.attempts
