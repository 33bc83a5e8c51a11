"""Finding a model in the daemon's list: by id or alias (what a daemon from before
`list_models {model}` leaves to the client), or the newest of a provider (the catalog
lists each provider's newest first), optionally with a capability."""

from __future__ import annotations

from collections.abc import Sequence

from .protocol.messages import ModelInfo

#: What `latest_model(provider, capability)` may ask for: the fields of `Capabilities`
#: (ModelInfo's own flags where a daemon does not send them).
CAPABILITIES = (
    "tools",
    "vision",
    "reasoning",
    "structured_output",
    "streaming",
    "documents",
    "audio",
    "parallel_tool_calls",
    "prompt_caching",
    "prefill",
)
#: Those a daemon without `capabilities` gives as ModelInfo flags.
_FLAGS = frozenset({"tools", "vision", "reasoning", "structured_output", "streaming"})


def find_model(models: Sequence[ModelInfo], model: str) -> ModelInfo | None:
    for info in models:
        if info.id == model:
            return info
    for info in models:
        if model in info.aliases:
            return info
    return None


def has(info: ModelInfo, capability: str) -> bool:
    """Whether a request to `info` may use `capability` through the daemon."""
    if info.capabilities is not None:
        return bool(getattr(info.capabilities, capability))
    return capability in _FLAGS and bool(getattr(info, capability))


def newest(models: Sequence[ModelInfo], provider: str, capability: str | None) -> ModelInfo | None:
    if capability is not None and capability not in CAPABILITIES:
        raise ValueError(f"unknown capability {capability!r}; use one of {', '.join(CAPABILITIES)}")
    for info in models:
        if info.provider == provider and info.in_catalog and (capability is None or has(info, capability)):
            return info
    return None
