"""What the supervisor reads of a request's terminal event when it ends: the log line's
outcome, the usage and cost admission settles, what a route tells its breaker and its
share. Read once per request (`summary_of` keeps it on the request), and only these
fields: a whole response's content is most of the frame.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from ..protocol.messages import ErrorInfo, RateLimit

if TYPE_CHECKING:
    from .requests import RequestState


class _Reason(msgspec.Struct, gc=False):
    reason: str = "other"


class _Tokens(msgspec.Struct, gc=False):
    input_tokens: int = 0
    output_tokens: int = 0


class Answer(msgspec.Struct):
    """A finish's response, or an error's partial, without its content."""

    finish_reason: _Reason = msgspec.field(default_factory=_Reason)
    usage: _Tokens = msgspec.field(default_factory=_Tokens)
    cost_usd: float | None = None
    rate_limit: RateLimit | None = None


class Summary(msgspec.Struct):
    """A terminal event (`Finish` or `ErrorEvent`), with the wire's defaults."""

    type: str = ""
    response: Answer | None = None
    partial: Answer | None = None
    error: ErrorInfo | None = None

    def billed(self) -> tuple[int, float | None]:
        """Input + output tokens and the cost the event reports (0 and None when it
        reports none: a request that failed before the provider answered)."""
        answer = self.response if self.type == "finish" else self.partial
        if answer is None:
            return 0, None
        return answer.usage.input_tokens + answer.usage.output_tokens, answer.cost_usd

    def outcome(self) -> str:
        """How the request ended, for its log line: the finish reason and tokens, or the
        error class."""
        if self.type == "finish" and self.response is not None:
            usage = self.response.usage
            return f"{self.response.finish_reason.reason}, {usage.input_tokens} in / {usage.output_tokens} out"
        if self.type == "error" and self.error is not None:
            return f"error {self.error.error_class}"
        return "ended"


_decoder = msgspec.msgpack.Decoder(Summary)
#: What an unreadable or missing terminal event reads as.
NOTHING = Summary()


def summary_of(state: RequestState) -> Summary:
    """The request's terminal event as read from its last frame (`NOTHING` when it has
    none or it cannot be read), kept on the request for the next reader."""
    summary = state.summary
    if summary is None:
        summary = state.summary = summary_in(state.ring[-1]) if state.ring else NOTHING
    return summary


def summary_in(frame: bytes) -> Summary:
    """The terminal event in one frame (`NOTHING` when it cannot be read)."""
    cut = frame.find(b"\x00", 0, 256)  # the topic's end (`codec.split_frame`, without its copies)
    try:
        return _decoder.decode(memoryview(frame)[cut + 1 :])
    except (msgspec.DecodeError, msgspec.ValidationError):
        return NOTHING
