"""The keyword arguments a request takes, typed, so that an editor or a type checker
catches a misspelt one (`temprature=`) before the client refuses it at run time.

`Client.complete` and `Client.stream` take `**fields: Unpack[RequestFields]`,
`generate` and `stream` `**fields: Unpack[LoopFields]`; the names and types
follow `Request`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal, TypedDict

from .protocol.messages import ResponseFormat, Timeouts, ToolChoice


class LoopFields(TypedDict, total=False):
    """The request fields of `generate` and `stream`, which take `tools` as their own argument."""

    provider: str
    tool_choice: ToolChoice | Literal["auto", "none", "required", "any"] | str | dict[str, Any]
    response_format: ResponseFormat | dict[str, Any]
    temperature: float
    top_p: float
    max_tokens: int
    stop_sequences: list[str]
    seed: int
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
    metadata: dict[str, str]
    provider_options: dict[str, dict[str, Any]]
    session_id: str
    max_retries: int
    timeouts: Timeouts | dict[str, float]
    include_raw: bool
    passthrough: bool


class RequestFields(LoopFields, total=False):
    tools: Sequence[Any | Callable[..., Any] | dict[str, Any]]
