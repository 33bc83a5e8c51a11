"""Conditions that end a tool loop early (`generate(..., stop_when=...)`).

A condition is any callable given the loop's steps so far (a list of `StepResult`) that
returns true to stop. It is asked after each step whose tools ran, before the model is
called again, so the step's results are in `result.messages` and the caller can go on
from there. Several conditions (a list) stop the loop when any one of them holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .results import StepResult

StopCondition = Callable[[Sequence[StepResult]], bool]


def step_count_is(n: int) -> StopCondition:
    """Stop once the loop has made `n` model calls."""
    if n < 1:
        raise ValueError("step_count_is: n must be 1 or more")

    def stop(steps: Sequence[StepResult]) -> bool:
        return len(steps) >= n

    return stop


def has_tool_call(*names: str) -> StopCondition:
    """Stop after a step in which the model called one of `names` (any tool, without names)."""

    def stop(steps: Sequence[StepResult]) -> bool:
        calls = steps[-1].tool_calls if steps else []
        return any(not names or c.name in names for c in calls)

    return stop


def as_conditions(stop_when: StopCondition | Sequence[StopCondition] | None) -> list[StopCondition]:
    if stop_when is None:
        return []
    if callable(stop_when):
        return [stop_when]
    conditions = list(stop_when)
    for c in conditions:
        if not callable(c):
            raise TypeError(f"stop_when: a condition is a callable given the steps, not {type(c).__name__}")
    return conditions


__all__ = ["StopCondition", "as_conditions", "has_tool_call", "step_count_is"]
