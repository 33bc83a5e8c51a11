"""Which provider a model name leads to, as the daemon would resolve it.

A door needs to know where a request goes before it sends it when what the
client asked for is said differently per provider (Anthropic's server tools and
thinking settings go to an Anthropic provider as its own options, and are
refused elsewhere; a thinking block coming back is the serving provider's). It
asks the daemon over the public protocol, `list_models` for the catalog and
`status` for each provider's type, keeps the answer a few seconds, and resolves
names with the catalog's own lookup, so the door and the daemon agree.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import anyio

from ..client import Client
from ..config.catalog import Catalog, UnknownModel
from ..errors import DaemonUnavailable, TrunklineError
from ..protocol.messages import ModelInfo

log = logging.getLogger("trunkline.frontdoor")

#: Seconds a reading of the catalog serves before the next request reads it again (a
#: reload that adds a provider or a model shows within this).
MAX_AGE_S = 5.0


@dataclass(frozen=True)
class Target:
    """Where a model name leads. All None when the door could not tell (an unknown
    model, a daemon not answering): the daemon then says why when the call is made."""

    provider: str | None = None
    provider_type: str | None = None
    model: ModelInfo | None = None

    @property
    def wire_name(self) -> str | None:
        return self.model.wire_name if self.model is not None else None

    def named(self) -> str:
        """The target in words, for a refusal."""
        if self.model is None:
            return "this model"
        return f"{self.model.id} (provider {self.provider}, of type {self.provider_type})"


UNKNOWN = Target()


class Targets:
    """The daemon's catalog and provider types, as last read."""

    def __init__(self, max_age_s: float = MAX_AGE_S) -> None:
        self.max_age_s = max_age_s
        self._catalog: Catalog | None = None
        self._types: dict[str, str] = {}
        self._read_at = -float("inf")
        self._lock = anyio.Lock()

    async def refresh(self, client: Client) -> None:
        """Read the catalog again if the last reading is too old (one reader at a time;
        the others wait for its answer). A daemon that does not answer leaves the last."""
        if time.monotonic() - self._read_at < self.max_age_s:
            return
        async with self._lock:
            if time.monotonic() - self._read_at < self.max_age_s:
                return
            try:
                models = await client.list_models()
                status = await client.status()
            except (DaemonUnavailable, TrunklineError, OSError) as exc:
                log.debug("could not read the catalog: %s", exc)
                return
            self.load(models, {w.provider: w.provider_type for w in status.workers})

    def load(self, models: list[ModelInfo], types: dict[str, str]) -> None:
        """Take a reading (what `refresh` read, or a test's)."""
        pricing = next((m.pricing_version for m in models if m.pricing_version), "")
        entries = {m.id: m for m in models}
        self._catalog = Catalog(entries, pricing or "", providers=types, configured=types)
        self._types = dict(types)
        self._read_at = time.monotonic()

    def resolve(self, model: str) -> Target:
        if self._catalog is None:
            return UNKNOWN
        try:
            info = self._catalog.resolve(model)
        except UnknownModel:
            return UNKNOWN
        provider_type = self._types.get(info.provider)
        if provider_type is None:
            return UNKNOWN  # a catalog model of a provider this daemon does not run
        return Target(info.provider, provider_type, info)
