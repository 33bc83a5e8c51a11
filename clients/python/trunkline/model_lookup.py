"""Finding a model in the daemon's list: by id or alias, or the newest of a provider
(the catalog lists each provider's newest first), optionally with a capability."""

from __future__ import annotations

from collections.abc import Sequence

from .protocol.messages import ModelInfo

#: What `latest_model(provider, capability)` may ask for: ModelInfo's capability flags.
CAPABILITIES = ("tools", "vision", "reasoning", "structured_output", "streaming")


def find_model(models: Sequence[ModelInfo], model: str) -> ModelInfo | None:
    for info in models:
        if info.id == model:
            return info
    for info in models:
        if model in info.aliases:
            return info
    return None


def newest(models: Sequence[ModelInfo], provider: str, capability: str | None) -> ModelInfo | None:
    if capability is not None and capability not in CAPABILITIES:
        raise ValueError(f"unknown capability {capability!r}; use one of {', '.join(CAPABILITIES)}")
    for info in models:
        if info.provider == provider and info.in_catalog and (capability is None or getattr(info, capability)):
            return info
    return None
