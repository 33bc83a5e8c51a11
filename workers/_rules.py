"""What a model's catalog rules (`ModelInfo.rules`) let a translator send.

Every translator asks the same questions (does this model take `temperature`?
is it reasoning on this call?), so the answers live here, once. A parameter a
model does not take is dropped with a warning that names the rule; requests a
model cannot serve at all are refused earlier, by supervisor/validate.py with
config/rules.py.
"""

from __future__ import annotations

from ..protocol.messages import ModelInfo, Request, WarningInfo
from ._warnings import warn

#: Sampling parameters in the order one is kept when a model takes only one.
SAMPLING_ORDER = ("temperature", "top_p", "top_k")


def effective_effort(request: Request, model: ModelInfo) -> str | None:
    """The effort the call runs at: the request's, else the model's documented default."""
    return request.reasoning_effort or model.rules.default_effort


def reasoning_on(request: Request, model: ModelInfo) -> bool:
    """Whether the model reasons on this call, as its rules say."""
    rules = model.rules
    if rules.thinking_always_on:
        return True
    if not model.reasoning:
        return False
    effort = request.reasoning_effort
    if effort is None:
        return rules.thinking_default_on
    return effort != "none"


def sampling(
    params: dict[str, float | None], request: Request, model: ModelInfo, warnings: list[WarningInfo]
) -> dict[str, float]:
    """The sampling parameters of `params` (name -> value) the model takes on this call."""
    kept = {name: value for name, value in params.items() if value is not None}
    rules = model.rules
    if not kept:
        return kept
    if rules.sampling is not None:
        for name in [n for n in kept if n not in rules.sampling]:
            del kept[name]
            warn(
                warnings, "sampling_unsupported", f"{model.id} does not take {name} (rule `sampling`); it was left out"
            )
    if kept and rules.sampling_needs_no_reasoning and effective_effort(request, model) != "none":
        warn(
            warnings,
            "sampling_unsupported",
            f"{model.id} takes {' and '.join(kept)} only with reasoning_effort none "
            "(rule `sampling_needs_no_reasoning`); left out",
        )
        kept = {}
    if rules.sampling_exclusive and len(kept) > 1:
        first = next(n for n in SAMPLING_ORDER if n in kept)
        for name in [n for n in kept if n != first]:
            del kept[name]
            warn(
                warnings,
                "sampling_unsupported",
                f"{model.id} takes one sampling parameter per request (rule `sampling_exclusive`); "
                f"{first} was sent and {name} left out",
            )
    return kept
