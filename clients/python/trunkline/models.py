"""The catalog from anywhere: the model lookups on the default client, for scripts and
agents that pick a model by what it can do rather than by a name they remember."""

from __future__ import annotations

from .client import Client
from .default_client import get_client
from .protocol.messages import ModelInfo


async def list_models(provider: str | None = None, *, client: Client | None = None) -> list[ModelInfo]:
    """Every model the daemon knows (the catalog and configured providers' models)."""
    return await (await get_client(client)).list_models(provider)


async def get_model_info(model: str, provider: str | None = None, *, client: Client | None = None) -> ModelInfo | None:
    """The entry `complete()` would serve `model` with (any name it routes: canonical id,
    alias, provider's name, `provider:name`), capabilities included; None when unknown."""
    return await (await get_client(client)).get_model_info(model, provider)


async def latest_model(
    provider: str, capability: str | None = None, *, client: Client | None = None
) -> ModelInfo | None:
    """The newest model of `provider`, optionally the newest with `capability` (a field
    of `Capabilities`: tools, vision, documents, audio, prefill...); None when there is none."""
    return await (await get_client(client)).latest_model(provider, capability)


#: The unified-client spec's name for `latest_model`.
get_latest_model = latest_model
