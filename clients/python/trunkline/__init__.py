"""trunkline: one daemon, one protocol, every LLM provider.

The client API lives here; the daemon's parts (`trunkline.supervisor`,
`trunkline.workers`) and the wire protocol (`trunkline.protocol`) are
subpackages of the same namespace. The names below load on first use, so a
worker or the supervisor (which import `trunkline.<part>`) never pays for the
client's imports: a worker starts ~0.2 s sooner and smaller.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .client import Client, ResponseStream, build_request
    from .default_client import set_default_client
    from .errors import (
        AccessDeniedError,
        AuthenticationError,
        ContentFilterError,
        ContextLengthError,
        DaemonNotRunning,
        DaemonUnavailable,
        InvalidRequestError,
        InvalidResponseError,
        ModelNotLoadedError,
        NetworkError,
        NoObjectGeneratedError,
        NotConfiguredError,
        NotFoundError,
        OtherError,
        ProviderTimeoutError,
        QuotaExceededError,
        RateLimitError,
        RequestCancelledError,
        ServerError,
        TLSError,
        TrunklineError,
        UnavailableError,
    )
    from .generation import GenerateStream, generate, stream
    from .middleware import Middleware
    from .models import get_latest_model, get_model_info, latest_model, list_models
    from .protocol import __version__
    from .protocol.accumulate import StreamAccumulator
    from .protocol.messages import (
        AudioPart,
        DocumentPart,
        FinishReason,
        ImagePart,
        Message,
        ModelInfo,
        RedactedThinkingPart,
        Request,
        Response,
        ResponseFormat,
        TextPart,
        ThinkingPart,
        ToolCallPart,
        ToolChoice,
        ToolResultPart,
        Usage,
    )
    from .results import GenerateResult, ObjectResult, StepFinish, StepResult
    from .stop_conditions import has_tool_call, step_count_is
    from .structured import ObjectStream, generate_object, stream_object
    from .sync import SyncClient
    from .tools import Tool, tool


_WHERE = {
    "Client": ".client",
    "ResponseStream": ".client",
    "build_request": ".client",
    "SyncClient": ".sync",
    "StreamAccumulator": ".protocol.accumulate",
    "__version__": ".protocol",
    "generate": ".generation",
    "stream": ".generation",
    "GenerateStream": ".generation",
    "generate_object": ".structured",
    "stream_object": ".structured",
    "ObjectStream": ".structured",
    "get_model_info": ".models",
    "latest_model": ".models",
    "get_latest_model": ".models",
    "list_models": ".models",
    "Tool": ".tools",
    "tool": ".tools",
    "Middleware": ".middleware",
    "set_default_client": ".default_client",
    "GenerateResult": ".results",
    "StepResult": ".results",
    "StepFinish": ".results",
    "ObjectResult": ".results",
    "step_count_is": ".stop_conditions",
    "has_tool_call": ".stop_conditions",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        module = _WHERE[name]
    elif name.endswith("Error") or name in ("DaemonNotRunning", "DaemonUnavailable"):
        module = ".errors"
    elif name in __all__:
        module = ".protocol.messages"
    else:
        raise AttributeError(f"module 'trunkline' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "AccessDeniedError",
    "AudioPart",
    "AuthenticationError",
    "Client",
    "ContentFilterError",
    "ContextLengthError",
    "DaemonNotRunning",
    "DaemonUnavailable",
    "DocumentPart",
    "FinishReason",
    "GenerateResult",
    "GenerateStream",
    "ImagePart",
    "InvalidRequestError",
    "InvalidResponseError",
    "Message",
    "Middleware",
    "ModelInfo",
    "ModelNotLoadedError",
    "NetworkError",
    "NoObjectGeneratedError",
    "NotConfiguredError",
    "NotFoundError",
    "ObjectResult",
    "ObjectStream",
    "OtherError",
    "ProviderTimeoutError",
    "QuotaExceededError",
    "RateLimitError",
    "RedactedThinkingPart",
    "Request",
    "RequestCancelledError",
    "Response",
    "ResponseFormat",
    "ResponseStream",
    "ServerError",
    "StepFinish",
    "StepResult",
    "StreamAccumulator",
    "SyncClient",
    "TLSError",
    "TextPart",
    "ThinkingPart",
    "Tool",
    "ToolCallPart",
    "ToolChoice",
    "ToolResultPart",
    "TrunklineError",
    "UnavailableError",
    "Usage",
    "__version__",
    "build_request",
    "generate",
    "generate_object",
    "get_latest_model",
    "get_model_info",
    "has_tool_call",
    "latest_model",
    "list_models",
    "set_default_client",
    "step_count_is",
    "stream",
    "stream_object",
    "tool",
]
