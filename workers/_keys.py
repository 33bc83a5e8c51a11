"""The provider's keys as its worker holds them (`providers.<name>.keys_env`): each job
names one by index (`Job.key_index`); a 429, 401 or 403 on a key rests it here and in
the supervisor (`KeyFailed`), and the job's next attempt moves to a key that does not
rest. A key is only ever named by its variable: its value goes in a request header and
nowhere else.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import trio

from ..config.loader import KEY_FAILURES, ProviderConfig
from .errors import ProviderError


class WorkerKeys:
    """The keys by index: `names` (their variables) and `values` (None: not set)."""

    def __init__(self, config: ProviderConfig, clock: Callable[[], float] = trio.current_time) -> None:
        self.config = config
        self.names = config.key_names()
        self.values = config.api_keys()
        self.clock = clock
        self.resting_until = [-math.inf] * len(self.names)
        #: Keys to move between (`keys_env` with more than one): only then do failures rest one.
        self.several = len(self.names) > 1

    def problem(self, index: int) -> ProviderError | None:
        """Why key `index` cannot authenticate a job, or None. A provider without keys
        (the mock, Ollama) takes index 0 and sends none."""
        if not self.names:
            return None if index == 0 else self._out_of_range(index)
        if not 0 <= index < len(self.names):
            return self._out_of_range(index)
        if self.values[index] is None and self.several:
            return ProviderError("not_configured", f"key {index} of this provider, {self.names[index]}, is not set")
        return None

    def _out_of_range(self, index: int) -> ProviderError:
        have = f"{len(self.names)} keys ({', '.join(self.names)})" if self.names else "no key"
        return ProviderError("invalid_request", f"key_index {index} is out of range: this provider has {have}")

    def resting(self, index: int) -> bool:
        return self.resting_until[index] > self.clock()

    def failed(self, index: int, error: ProviderError) -> bool:
        """Rest key `index` after `error` if its class says something about the key (with
        several keys only); whether it did."""
        if not self.several or error.error_class not in KEY_FAILURES:
            return False
        until = self.clock() + self.config.key_cooldown(error.error_class, error.retry_after)
        self.resting_until[index] = max(self.resting_until[index], until)
        return True

    def another(self, index: int, tried: set[int]) -> int | None:
        """The next key after `index`, in turn, that is set, not tried yet by this job and
        not resting; None when there is none."""
        count = len(self.names)
        for step in range(1, count):
            other = (index + step) % count
            if other not in tried and self.values[other] is not None and not self.resting(other):
                return other
        return None
