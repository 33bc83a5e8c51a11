"""`trunkline reload` (and SIGHUP): read the config file and the catalog again, live.

Everything is read and checked first; only a configuration that loads whole
replaces the running one, so a broken file changes nothing. `reread` only reads
and compares: it returns what changes, and the daemon applies it to itself and
hands each child its part. Requests in flight keep what they started with (their
job holds its resolved model and prices).

Live from the next request: the catalog (prices, rules, the user's extra
models), the routes (`routes`) and the retry and timeout policies, which ride in each job while they
differ from those the provider's worker was started with. Live at once: the
supervision settings (restart limits, heartbeat timeout, grace periods), except
the heartbeat interval, which a worker takes when it starts, and an idle daemon's
exit time (`autostart.idle_exit_s`, read at each idle check). The rest is bound at
start (the sockets, limits, replay sizes, a provider's endpoint, key, headers
and options, providers added or removed): a change there is reported in
`restart_needed` and takes effect at the next daemon start. What is reported is
measured against what the daemon started with, not the previous file, so a file
put back as it was reports nothing. Running workers are never restarted by a
reload, so no request is dropped. Settings given on `trunkline serve`'s command
line stay laid over the file.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import msgspec

from ..config.catalog import Catalog
from ..config.loader import DEFAULTS_PATH, Config, ProviderConfig, load_config

#: Top-level settings read only at start.
_BOUND_AT_START = (
    "runtime_dir",
    "state_dir",
    "log_level",
    "endpoints",
    "limits",
    "replay",
    "metrics",
    "http",
    "telemetry",
    "clients",
)

#: The retry and timeout policies a provider's jobs carry (`Job.retry`, `Job.timeouts`),
#: each None where the worker's own stands.
JobPolicies = tuple[dict[str, Any] | None, dict[str, Any] | None]


@dataclass(frozen=True, slots=True)
class Reloaded:
    """What a reload changes; the daemon applies it."""

    config: Config
    catalog: Catalog
    #: By provider, only for those whose policies differ from what its worker started with.
    job_policies: dict[str, JobPolicies]
    #: The settings bound at start that the new file changes (`ReloadResult.restart_needed`).
    restart_needed: list[str]


def reread(running: Config, started: Config, catalog: Catalog, providers: Collection[str]) -> Reloaded:
    """The config file of the `running` configuration read again, and the catalog, with
    what differs from what the daemon was `started` with. `catalog` is the running one
    (a provider's "configured" is bound at start), `providers` those with a worker slot.
    Raises ConfigError when the file cannot be used; nothing is changed by reading it."""
    path = None if running.source in ("", str(DEFAULTS_PATH)) else running.source
    config = load_config(path, overrides=running.overrides)
    new_catalog = Catalog.load(
        config.models, providers=catalog.providers, configured=catalog.configured, types=catalog.types
    )
    restart = _restart_needed(started, config)
    for name in providers:
        if name not in config.providers:
            # A removed provider keeps running until the next start, with its settings.
            config.providers[name] = started.providers[name]
    policies = {name: _policies(started, config, name) for name in providers}
    return Reloaded(
        config=config,
        catalog=new_catalog,
        job_policies={name: p for name, p in policies.items() if p != (None, None)},
        restart_needed=restart,
    )


def _policies(started: Config, now: Config, name: str) -> JobPolicies:
    """The retry and timeout policies a job must carry: those that differ from the worker's own."""
    if name not in started.providers:
        return None, None
    retry, timeouts = now.provider_retry(name), now.provider_timeouts(name)
    return (
        msgspec.to_builtins(retry) if retry != started.provider_retry(name) else None,
        msgspec.to_builtins(timeouts) if timeouts != started.provider_timeouts(name) else None,
    )


def _restart_needed(started: Config, new: Config) -> list[str]:
    """The settings bound at start whose new value differs from the one running."""
    out = [key for key in _BOUND_AT_START if getattr(started, key) != getattr(new, key)]
    if started.supervision.heartbeat_interval_s != new.supervision.heartbeat_interval_s:
        out.append("supervision.heartbeat_interval_s")  # workers take it when they start
    for name in sorted(set(started.providers) | set(new.providers)):
        if _bound(started.providers.get(name)) != _bound(new.providers.get(name)):
            out.append(f"providers.{name}")
    return out


def _bound(provider: ProviderConfig | None) -> ProviderConfig | None:
    """A provider's settings without the policies a reload applies live."""
    return None if provider is None else msgspec.structs.replace(provider, retry=None, timeouts=None)
