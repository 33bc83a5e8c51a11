"""Requests a model's catalog rules say it cannot serve at all.

The supervisor refuses these before any provider call (supervisor/validate.py),
so every provider gets the same answer; what a model merely does not take is
left out by the translators instead (workers/_rules.py).
"""

from __future__ import annotations

from ..protocol.messages import ModelInfo, Request


def effort_refusal(request: Request, model: ModelInfo) -> str | None:
    """Why the model cannot run at the requested effort, or None."""
    effort = request.reasoning_effort
    efforts = model.rules.efforts
    if effort is None or efforts is None or effort in efforts:
        return None
    return (
        f"reasoning_effort {effort!r} is not available on {model.id}, which takes {', '.join(efforts)} (rule `efforts`)"
    )


def forced_tool_refusal(request: Request, model: ModelInfo) -> str | None:
    """Why a forced tool choice cannot be served, or None. Only a model whose reasoning
    cannot be turned off is refused; elsewhere the translator turns reasoning off or lets
    the model choose, with a warning."""
    choice = request.tool_choice
    if choice is None or choice.mode not in ("required", "tool"):
        return None
    rules = model.rules
    if rules.forced_tool_with_thinking or not rules.thinking_always_on:
        return None
    return (
        f"tool_choice {choice.mode!r} forces a tool, which {model.id} refuses while it reasons, and its "
        "reasoning cannot be turned off (rules `forced_tool_with_thinking`, `thinking_always_on`); "
        "use tool_choice auto"
    )
