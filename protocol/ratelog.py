"""A log that input cannot flood: at most a few lines per second, then a count."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class RateLimitedLog:
    """`note()` logs one warning line, at most `per_second` a second; what is held back
    is summed up in one line when the next second's first note arrives."""

    def __init__(self, log: logging.Logger, per_second: int = 5, clock: Callable[[], float] = time.monotonic) -> None:
        self.log = log
        self.per_second = per_second
        self.clock = clock
        self._window = -1.0
        self._logged = 0
        self._held = 0

    def note(self, line: str) -> bool:
        """Log `line` unless this second's quota is used; True when it was logged."""
        now = self.clock()
        if now - self._window >= 1.0:
            if self._held:
                self.log.warning("... and %d more like it in the last second, not logged", self._held)
            self._window, self._logged, self._held = now, 0, 0
        if self._logged >= self.per_second:
            self._held += 1
            return False
        self._logged += 1
        self.log.warning("%s", line)
        return True
