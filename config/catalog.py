"""The model catalog: canonical ids, aliases, limits, capabilities and prices.

The catalog is advisory: a name it does not know passes through to a known
provider unchanged (with permissive capabilities), so a new model works the
day it ships.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, date, datetime
from pathlib import Path

import msgspec

from ..protocol.messages import ModelInfo, Price, PriceTier, Usage
from .capabilities import with_capabilities
from .loader import ConfigError
from .model_entries import entry_fields, unknown_key
from .names import nearest

MODELS_PATH = Path(__file__).resolve().with_name("models.yaml")


class CatalogFile(msgspec.Struct, forbid_unknown_fields=True):
    pricing_version: str
    #: By canonical id; each written as `ModelInfo` without what its id and the catalog give.
    models: dict[str, ModelInfo]


class UnknownModel(LookupError):
    """No provider and no catalog entry match the model name."""


def load_catalog_file(path: Path = MODELS_PATH) -> CatalogFile:
    from .yaml_file import YAMLError, load_fast  # only where a file is read: see yaml_file

    try:
        data = load_fast(path.read_text())
        problem = unknown_key(data, CatalogFile)
        if problem is not None:
            raise problem
        if isinstance(data, dict) and isinstance(data.get("models"), dict):
            data = {**data, "models": {k: entry_fields(k, v) for k, v in data["models"].items()}}
        return msgspec.convert(data, CatalogFile)
    except (OSError, YAMLError, msgspec.ValidationError) as exc:
        raise ConfigError(f"catalog error in {path}: {exc}") from None


#: A dated snapshot id (`claude-haiku-4-5-20251001`, `gpt-4o-2024-08-06`).
_SNAPSHOT = re.compile(r".*-(\d{8}|\d{4}-\d{2}-\d{2})")


def _pinned(info: ModelInfo, alias: str) -> ModelInfo:
    """The entry for `alias`; a dated snapshot the caller names is served as named (the
    provider may pin behaviour to it), with the entry's prices and rules."""
    if not _SNAPSHOT.fullmatch(alias) or alias == info.wire_name:
        return info
    return msgspec.structs.replace(info, id=f"{info.provider}:{alias}", wire_name=alias)


class Catalog:
    """Lookups over the shipped catalog plus the user's extra entries. `types` maps a
    provider to its type (a provider not in it is taken as its own type): each entry's
    capabilities are its flags met with what that type's implementation carries,
    worked out here once, not per request."""

    def __init__(
        self,
        entries: dict[str, ModelInfo],
        pricing_version: str,
        providers: Iterable[str] = (),
        configured: Iterable[str] = (),
        types: Mapping[str, str] | None = None,
    ) -> None:
        self.pricing_version = pricing_version
        self.providers = set(providers)
        self.configured = set(configured)
        self.types = dict(types or {})
        self._by_id: dict[str, ModelInfo] = {}
        self._by_alias: dict[str, ModelInfo] = {}
        self._by_wire: dict[str, list[ModelInfo]] = {}
        for model_id, entry in entries.items():
            provider = model_id.partition(":")[0]
            info = msgspec.structs.replace(
                entry,
                id=model_id,
                provider=provider,
                display_name=entry.display_name or model_id,
                pricing_version=pricing_version,
                configured=provider in self.configured,
            )
            # Entries read back from a daemon (the front door's copy) keep the capabilities
            # it worked out, unless this catalog is told the provider's type.
            if entry.capabilities is None or provider in self.types:
                info = with_capabilities(info, self.types.get(provider))
            self._by_id[model_id] = info
            self._by_wire.setdefault(entry.wire_name, []).append(info)
            for alias in entry.aliases:
                self._by_alias[alias] = info

    @classmethod
    def load(
        cls,
        extra: dict[str, ModelInfo] | None = None,
        providers: Iterable[str] = (),
        configured: Iterable[str] = (),
        path: Path = MODELS_PATH,
        types: Mapping[str, str] | None = None,
    ) -> Catalog:
        shipped = load_catalog_file(path)
        entries = dict(shipped.models)
        entries.update(extra or {})
        return cls(entries, shipped.pricing_version, providers, configured, types)

    def models(self, provider: str | None = None) -> list[ModelInfo]:
        return [m for m in self._by_id.values() if provider is None or m.provider == provider]

    def resolve(self, model: str, provider: str | None = None) -> ModelInfo:
        """The catalog entry (or a pass-through entry) that serves `model`.

        Accepts a canonical `provider:name` id, an alias, a provider-native name
        with `provider` set, or a native name the catalog knows. Raises
        `UnknownModel` when none applies.

        Provider names are matched ignoring case (a configured name is always
        lowercase, so `MOCK:` can only mean `mock:`); the model's own name is
        exact, as providers take it, but one the catalog lists in another case is
        refused with the listed name rather than passed through."""
        if provider is None:
            head, sep, rest = model.partition(":")
            if sep and (named := self._provider_named(head)) is not None:
                provider, model = named, rest
        if provider is not None:
            if model[: len(provider) + 1].lower() == provider.lower() + ":":
                model = model[len(provider) + 1 :]
            provider = self._provider_named(provider) or provider
            found = self._by_id.get(f"{provider}:{model}")
            if found is None:
                alias = self._by_alias.get(model)
                if alias is not None and alias.provider == provider:
                    found = _pinned(alias, model)
            if found is None:
                found = next((m for m in self._by_wire.get(model, []) if m.provider == provider), None)
            if found is not None:
                return found
            if provider not in self.providers:
                raise UnknownModel(
                    f"unknown provider {provider!r}{self._nearest_provider(provider)}; the providers "
                    f"are: {', '.join(sorted(self.providers))}"
                )
            listed = self._listed_in_another_case(provider, model)
            if listed is not None:
                raise UnknownModel(
                    f"unknown model {f'{provider}:{model}'!r}; did you mean `{listed}`? (model names "
                    "are case-sensitive)"
                )
            return self._passed_through(provider, model)
        found = self._by_id.get(model)
        if found is None and model in self._by_alias:
            found = _pinned(self._by_alias[model], model)
        if found is None:
            matches = self._by_wire.get(model, [])
            if len(matches) == 1:
                found = matches[0]
            elif len(matches) > 1:
                options = ", ".join(m.id for m in matches)
                raise UnknownModel(f"model {model!r} is served by several providers ({options}); name one")
        if found is None:
            head, sep, rest = model.partition(":")
            if sep:
                # Closer than other names: `llama3.2:3b` is an Ollama model named without
                # its provider, not a misspelt `ollama`.
                close = nearest(head, self._provider_names(), cutoff=0.8)
                if close:
                    raise UnknownModel(
                        f"unknown model {model!r}: {head!r} is not a provider; did you mean "
                        f"`{close[0]}:{rest}`? (the providers are: {', '.join(sorted(self.providers))})"
                    )
                raise UnknownModel(
                    f"unknown model {model!r}: {head!r} is not a provider (the providers are: "
                    f"{', '.join(sorted(self.providers))}); name one, as `provider:{model}`"
                )
            close = nearest(model, [*self._by_id, *self._by_alias, *self._by_wire], n=3)
            hint = f"; did you mean {', '.join(f'`{c}`' for c in close)}?" if close else ""
            raise UnknownModel(
                f"unknown model {model!r}{hint}{' Use' if hint else '; use'} a catalog id such as `mock:echo`, an "
                "alias, or `provider:name` for a model the catalog does not list"
            )
        return found

    def _passed_through(self, provider: str, model: str) -> ModelInfo:
        """A name the catalog does not list: the provider decides, so its flags allow
        everything and only the implementation's capabilities bound it."""
        return with_capabilities(
            ModelInfo(
                id=f"{provider}:{model}",
                provider=provider,
                wire_name=model,
                display_name=model,
                context_window=None,
                max_output=None,
                tools=True,
                vision=True,
                reasoning=True,
                streaming=True,
                structured_output=True,
                pricing_version=None,
                configured=provider in self.configured,
                in_catalog=False,
            ),
            self.types.get(provider),
        )

    def _provider_names(self) -> set[str]:
        return self.providers | {m.provider for m in self._by_id.values()}

    def _provider_named(self, name: str) -> str | None:
        """The provider `name` means, exactly or in lowercase; None if none."""
        names = self._provider_names()
        for candidate in (name, name.lower()):
            if candidate in names:
                return candidate
        return None

    def _nearest_provider(self, name: str) -> str:
        close = nearest(name, self._provider_names(), cutoff=0.8)
        return f"; did you mean `{close[0]}`?" if close else ""

    def _listed_in_another_case(self, provider: str, model: str) -> str | None:
        """The catalog id of this provider's model that `model` names in another case."""
        folded = f"{provider}:{model}".casefold()
        for model_id, info in self._by_id.items():
            if info.provider == provider and model_id.casefold() == folded:
                return model_id
        for alias, info in self._by_alias.items():
            if info.provider == provider and alias.casefold() == model.casefold():
                return info.id
        return None


def price_on(price: Price, day: date | None = None) -> tuple[Price, str | None]:
    """The rates that apply on `day` (today, UTC, by default): the base price with the
    latest scheduled change already in effect laid over it, and that change's date."""
    if not price.scheduled:  # most prices: no need to know the day (a clock read and a format per call)
        return price, None
    today = (day or datetime.now(UTC).date()).isoformat()
    due = [s for s in price.scheduled if s.effective <= today]
    if not due:
        return price, None
    change = max(due, key=lambda s: s.effective)
    rates = {k: v for k, v in msgspec.structs.asdict(change).items() if v is not None and k != "effective"}
    return msgspec.structs.replace(price, **rates), change.effective


def compute_cost(
    usage: Usage, price: Price, *, service_tier: str | None = None, day: date | None = None
) -> float | None:
    """USD for `usage` at `price` (per million tokens); None when a needed price is unknown.

    Cached tokens are part of `input_tokens`, so they are taken out of the
    full-price input and billed at their own rates. A prompt over the long-context
    threshold bills the whole request at the long-context rates; a service tier the
    request asked for multiplies everything."""
    base, _ = price_on(price, day)
    if base.input is None or base.output is None:
        return None
    rates: Price | PriceTier = base
    tier = base.long_context
    if tier is not None and usage.input_tokens > tier.above_input_tokens:
        rates = tier

    def rate(name: str, *fallbacks: str) -> float:
        for key in (name, *fallbacks):
            value = getattr(rates, key)
            if value is None and rates is not base:
                value = getattr(base, key)
            if value is not None:
                return float(value)
        raise AssertionError("input and output are always priced")

    read = usage.cache_read_tokens
    write = usage.cache_write_tokens
    write_long = min(usage.cache_write_long_tokens, write)
    plain = max(usage.input_tokens - read - write, 0)
    total = plain * rate("input") + usage.output_tokens * rate("output")
    total += read * rate("cache_read", "input")
    total += (write - write_long) * rate("cache_write", "input")
    total += write_long * rate("cache_write_long", "cache_write", "input")
    if service_tier:
        total *= base.service_tiers.get(service_tier, 1.0)
    return total / 1_000_000
