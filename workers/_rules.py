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


def stop_sequences(request: Request, limit: int, api: str, warnings: list[WarningInfo]) -> list[str]:
    """The request's stop sequences an API that takes at most `limit` of them is sent: the
    first `limit`, in the caller's order (more are refused by the API)."""
    stops = list(request.stop_sequences)
    if len(stops) <= limit:
        return stops
    warn(
        warnings,
        "stop_sequences_truncated",
        f"{api} takes at most {limit} stop sequences; the first {limit} were sent and "
        f"{len(stops) - limit} left out ({', '.join(repr(s) for s in stops[limit:])})",
    )
    return stops[:limit]


def option_overrides_effort(request: Request, option: str, warnings: list[WarningInfo]) -> None:
    """Say so when a caller's provider option that sets reasoning (`option`, its full name)
    is sent as given and replaces what `reasoning_effort` would have made."""
    if request.reasoning_effort is not None:
        warn(
            warnings,
            "reasoning_effort_overridden",
            f"{option} was sent as given and wins over reasoning_effort {request.reasoning_effort}, which was not used",
        )
