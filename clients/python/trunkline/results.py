"""What the high-level calls return: one `StepResult` per model call, a `GenerateResult` for the loop."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .protocol.messages import (
    FinishReason,
    Message,
    Response,
    ToolCallPart,
    ToolResultPart,
    Usage,
    WarningInfo,
)


@dataclass
class StepResult:
    """One model call of a loop: its response, the calls it made and what running them gave."""

    response: Response
    tool_calls: list[ToolCallPart] = field(default_factory=list)
    tool_results: list[ToolResultPart] = field(default_factory=list)

    @property
    def text(self) -> str:
        return self.response.text

    @property
    def reasoning(self) -> str | None:
        return self.response.reasoning

    @property
    def finish_reason(self) -> FinishReason:
        return self.response.finish_reason

    @property
    def usage(self) -> Usage:
        return self.response.usage

    @property
    def cost_usd(self) -> float | None:
        return self.response.cost_usd

    @property
    def warnings(self) -> list[WarningInfo]:
        return self.response.warnings


@dataclass
class GenerateResult:
    """A whole loop. `text`, `response`, `finish_reason`, `tool_calls` and `tool_results`
    are the last step's; `messages` is the conversation to continue from (any provider)."""

    steps: list[StepResult]
    messages: list[Message]
    #: True when a `stop_when` condition ended the loop (after that step's tools ran).
    stopped: bool = False

    @property
    def response(self) -> Response:
        return self.steps[-1].response

    @property
    def text(self) -> str:
        return self.response.text

    @property
    def reasoning(self) -> str | None:
        return self.response.reasoning

    @property
    def finish_reason(self) -> FinishReason:
        return self.response.finish_reason

    @property
    def tool_calls(self) -> list[ToolCallPart]:
        return self.steps[-1].tool_calls

    @property
    def tool_results(self) -> list[ToolResultPart]:
        return self.steps[-1].tool_results

    @property
    def usage(self) -> Usage:
        return self.response.usage

    @property
    def warnings(self) -> list[WarningInfo]:
        """The last step's warnings (`tool_rounds_exhausted` when the loop stopped with
        calls the model still waits for)."""
        return self.response.warnings

    @property
    def total_usage(self) -> Usage:
        total = Usage()
        for step in self.steps:
            total = total + step.usage
        return total

    @property
    def total_cost_usd(self) -> float | None:
        """The sum of the steps' costs; None when no step's cost is known."""
        costs = [s.cost_usd for s in self.steps if s.cost_usd is not None]
        return sum(costs) if costs else None


@dataclass
class StepFinish:
    """A stream's step boundary: step `index` ended, its tools ran, and another step follows."""

    index: int
    step: StepResult
    type: str = "step_finish"


@dataclass
class ObjectResult:
    """`generate_object`'s answer: the validated `object` and the loop that produced it."""

    object: Any
    result: GenerateResult

    @property
    def response(self) -> Response:
        return self.result.response

    @property
    def text(self) -> str:
        return self.result.text

    @property
    def usage(self) -> Usage:
        return self.result.total_usage


__all__ = ["GenerateResult", "ObjectResult", "StepFinish", "StepResult"]
