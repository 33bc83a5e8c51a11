"""Restart intensity: how many crashes a provider's worker may have before we stop trying.

A sliding window over `trio.current_time()`, so tests drive it with a mock clock.
"""

from __future__ import annotations

from collections import deque


class Intensity:
    """Allows `max_restarts` restarts within any `window_s` seconds."""

    def __init__(self, max_restarts: int, window_s: float) -> None:
        self.max_restarts = max_restarts
        self.window_s = window_s
        self._times: deque[float] = deque()

    def allow(self, now: float) -> bool:
        """Record a crash at `now`; False when it is one too many."""
        self._times.append(now)
        while self._times and now - self._times[0] > self.window_s:
            self._times.popleft()
        return len(self._times) <= self.max_restarts

    @property
    def recent(self) -> int:
        """Crashes counted in the window (as of the last `allow`)."""
        return len(self._times)

    def reset(self) -> None:
        self._times.clear()
