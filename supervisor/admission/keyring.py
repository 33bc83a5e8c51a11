"""A provider's several API keys (`providers.<name>.keys_env`), given to its jobs in turn.

The supervisor picks the key of each job that no route chose (`pick`, round-robin),
skipping a key that rests: one the provider answered 429 (for its Retry-After, else
the provider's `key_cooldown_s`) or 401/403 (for `key_cooldown_s`), as the worker
reports it (`failed`). When every key rests, the request is refused before any call,
with the class of the key that frees first and when it does. Keys are named by
their variables here and everywhere: the supervisor never reads a key's value.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from ...config.loader import KEY_FAILURES, ProviderConfig
from ...protocol.messages import RETRYABLE, ApiKeyStatus, ErrorClass, ErrorInfo


class Keyring:
    """The keys of one provider, by index (`Job.key_index`). `usable[i]`: key i's variable
    is set (a key that is not set is never picked). `cooldown(error_class,
    retry_after_s)` says how long a key rests after such an answer. The clock is
    monotonic, not trio's: the metrics read `use` on the scrape's thread."""

    def __init__(
        self,
        provider: str,
        names: list[str],
        usable: list[bool],
        cooldown: Callable[[str, float | None], float],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.provider = provider
        self.names = names
        self.usable = usable
        self.cooldown = cooldown
        self.clock = clock
        self.resting_until = [-math.inf] * len(names)
        self.rested_for: list[ErrorClass | None] = [None] * len(names)
        self.requests = [0] * len(names)
        self._next = 0

    @classmethod
    def of(cls, name: str, config: ProviderConfig) -> Keyring | None:
        """The keyring of a provider with several keys; None for one key or none (its
        jobs all take key 0, and a submit does no work for keys)."""
        if len(config.keys_env) < 2:
            return None
        return cls(name, config.key_names(), [key is not None for key in config.api_keys()], config.key_cooldown)

    def pick(self) -> int | None:
        """The next key in turn that is set and not resting, counted as given one more
        request; None when every key rests."""
        now = self.clock()
        count = len(self.names)
        for step in range(count):
            index = (self._next + step) % count
            if self.usable[index] and self.resting_until[index] <= now:
                self._next = index + 1
                self.requests[index] += 1
                return index
        return None

    def next_key(self) -> int | ErrorInfo:
        """`pick`, or why no key may be used now (the submit is refused with it)."""
        index = self.pick()
        return self.refusal() if index is None else index

    def failed(self, index: int, error_class: ErrorClass, retry_after_s: float | None) -> float | None:
        """Key `index` was answered `error_class`: a 429, 401 or 403 rests it (other
        classes say nothing about the key). Until when (this keyring's clock), if that
        rest is longer than the one it had."""
        if error_class not in KEY_FAILURES or not 0 <= index < len(self.names):
            return None
        until = self.clock() + self.cooldown(error_class, retry_after_s)
        if until <= self.resting_until[index]:
            return None
        self.resting_until[index] = until
        self.rested_for[index] = error_class
        return until

    def rest(self, index: int, until: float) -> None:
        """Key `index` rests until then (this keyring's clock): another daemon saw it
        refused. Its class is not known here."""
        if 0 <= index < len(self.names) and until > self.resting_until[index]:
            self.resting_until[index] = until

    def refusal(self) -> ErrorInfo:
        """Why a request cannot be given a key now: every key set rests. The class is that
        of the key freeing first (`rate_limit`, `authentication` or `access_denied`), with
        the wait."""
        usable = [i for i, ok in enumerate(self.usable) if ok]
        if not usable:
            return ErrorInfo(
                error_class="not_configured",
                message=f"provider {self.provider}: none of {', '.join(self.names)} is set",
                provider=self.provider,
            )
        first = min(usable, key=lambda i: self.resting_until[i])
        wait = max(self.resting_until[first] - self.clock(), 0.0)
        error_class = self.rested_for[first] or "rate_limit"
        names = ", ".join(self.names[i] for i in usable)
        why = "answered 429 (rate limited)" if error_class == "rate_limit" else f"refused ({error_class})"
        return ErrorInfo(
            error_class=error_class,
            message=f"every key of provider {self.provider} rests: each was {why} or so recently ({names}); "
            f"{self.names[first]} is used again in {wait:.0f}s",
            retryable=RETRYABLE[error_class],
            retry_after_s=round(wait, 3),
            provider=self.provider,
        )

    def use(self) -> list[ApiKeyStatus]:
        """Each key's use now, for `status`."""
        now = self.clock()
        out = []
        for index, name in enumerate(self.names):
            resting = self.resting_until[index] > now
            out.append(
                ApiKeyStatus(
                    variable=name,
                    set=self.usable[index],
                    requests=self.requests[index],
                    cooling_s=round(self.resting_until[index] - now, 3) if resting else None,
                    last_error=self.rested_for[index],
                )
            )
        return out
