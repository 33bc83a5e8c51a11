"""`trunkline reload` (and SIGHUP): read the config file and the catalog again, live.

Everything is read and checked first; only a configuration that loads whole
replaces the running one, so a broken file changes nothing. Requests in flight
keep what they started with (their job holds its resolved model and prices).

Live from the next request: the catalog (prices, rules, the user's extra
models) and the retry and timeout policies, which ride in each job while they
differ from those the provider's worker was started with. Live at once: the
supervision settings (restart limits, heartbeat timeout, grace periods), except
the heartbeat interval, which a worker takes when it starts. The rest is bound at
start (the sockets, limits, replay sizes, a provider's endpoint, key, headers
and options, providers added or removed): a change there is reported in
`restart_needed` and takes effect at the next daemon start. What is reported is
measured against what the daemon started with, not the previous file, so a file
put back as it was reports nothing. Running workers are never restarted by a
reload, so no request is dropped. Settings given on `trunkline serve`'s command
line stay laid over the file.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import msgspec

from ..config.catalog import Catalog
from ..config.loader import DEFAULTS_PATH, Config, ConfigError, ProviderConfig, load_config
from ..protocol.messages import ErrorInfo, ReloadResult

if TYPE_CHECKING:
    from .daemon import Daemon

log = logging.getLogger("trunkline.supervisor")

#: Top-level settings read only at start.
_BOUND_AT_START = ("runtime_dir", "state_dir", "log_level", "endpoints", "limits", "replay", "metrics", "telemetry")


def reload(daemon: Daemon) -> ReloadResult:
    old = daemon.config
    path = None if old.source in ("", str(DEFAULTS_PATH)) else old.source
    try:
        config = load_config(path, overrides=old.overrides)
        catalog = Catalog.load(config.models, providers=daemon.catalog.providers, configured=daemon.catalog.configured)
    except ConfigError as exc:
        log.warning("reload refused, the running configuration stays: %s", exc)
        daemon.bus("config.reload_failed", error_class="invalid_request", detail=str(exc))
        return ReloadResult(
            ok=False,
            error=ErrorInfo(error_class="invalid_request", message=str(exc)),
            pricing_version=daemon.catalog.pricing_version,
            config_path=old.source,
        )
    spawned = getattr(daemon, "spawned_config", None) or old
    daemon.spawned_config = spawned  # what the daemon and its running workers were started with
    restart = _restart_needed(spawned, config)
    for name in daemon.slots:
        if name not in config.providers:
            # A removed provider keeps running until the next start, with its settings.
            config.providers[name] = spawned.providers[name]
    daemon.job_policies = {name: _policies(spawned, config, name) for name in daemon.slots}
    daemon.job_policies = {name: p for name, p in daemon.job_policies.items() if p != (None, None)}
    daemon.config = config
    daemon.catalog = catalog
    for slot in daemon.slots.values():
        # Restart limits apply live; the crashes already counted still count.
        slot.intensity.max_restarts = config.supervision.max_restarts
        slot.intensity.window_s = config.supervision.restart_window_s
    detail = f"pricing {catalog.pricing_version}" + (f"; needs a restart: {', '.join(restart)}" if restart else "")
    log.info("reloaded %s: %s", config.source, detail)
    daemon.bus("config.reloaded", detail=detail)
    return ReloadResult(
        ok=True, pricing_version=catalog.pricing_version, config_path=config.source, restart_needed=restart
    )


def _policies(spawned: Config, now: Config, name: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The retry and timeout policies a job must carry: those that differ from the worker's own."""
    if name not in spawned.providers:
        return None, None
    retry, timeouts = now.provider_retry(name), now.provider_timeouts(name)
    return (
        msgspec.to_builtins(retry) if retry != spawned.provider_retry(name) else None,
        msgspec.to_builtins(timeouts) if timeouts != spawned.provider_timeouts(name) else None,
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
