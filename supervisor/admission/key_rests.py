"""The rests of a provider's several keys (`keyring.py`), shared by every daemon that
names the same Redis: a key one daemon saw answer 429, 401 or 403 rests on all of them.

A rest is a cooldown in the admission store, of a scope that is not a route's
deployment: `key:<provider>:<variable>` (the loader keeps route deployments' ids off
that prefix). The daemon that saw the answer writes it at once; every daemon reads all
keys' rests in one request every `COOLING_READ_S`, as routes read their deployments'
cooldowns. Without shared state a keyring's rests stay in its daemon, where they are
decided anyway.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

import trio

from .keyring import Keyring
from .routes import COOLING_READ_S
from .store import AdmissionStore

log = logging.getLogger("trunkline.admission")

#: Route deployment ids may not start with it (`config.loader`).
PREFIX = "key:"


def scope_of(provider: str, variable: str) -> str:
    """The store's name of one key's rest (a deployment's cooldown, for the store)."""
    return f"{PREFIX}{provider}:{variable}"


class KeyRests:
    """The keyrings of a daemon's providers (those with several keys) and the shared
    store their rests go to."""

    def __init__(self, store: AdmissionStore, keyrings: Mapping[str, Keyring]) -> None:
        self.store = store
        self.keyrings = dict(keyrings)
        self.nursery: trio.Nursery | None = None

    def rested(self, provider: str, index: int, until_monotonic: float) -> None:
        """This daemon rested key `index` of `provider` until then (its own clock): the
        other daemons are told, off the caller's path."""
        keyring = self.keyrings.get(provider)
        if keyring is None or self.nursery is None:
            return
        until = time.time() + (until_monotonic - keyring.clock())
        self.nursery.start_soon(self._write, scope_of(provider, keyring.names[index]), until)

    async def _write(self, scope: str, until: float) -> None:
        try:
            await self.store.cooldown(scope, until)
        except Exception as exc:  # noqa: BLE001 - the rest holds here anyway; the others learn less
            log.warning("could not share the rest of %s: %s", scope, exc)

    async def read_once(self) -> None:
        """Every key's rest in the store, applied to the keyrings here."""
        scopes = {
            f"deployment:{scope_of(provider, name)}": (keyring, index)
            for provider, keyring in self.keyrings.items()
            for index, name in enumerate(keyring.names)
        }
        now = time.time()
        for use in await self.store.use(list(scopes), now):
            if use.cooldown_until is not None and use.cooldown_until > now:
                keyring, index = scopes[use.scope]
                keyring.rest(index, keyring.clock() + (use.cooldown_until - now))

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Until cancelled: read the rests every `COOLING_READ_S` (one request, whatever
        the traffic), and write this daemon's as they come."""
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            task_status.started()
            while True:
                try:
                    await self.read_once()
                except Exception as exc:  # noqa: BLE001 - a view of other daemons' rests is never worth a crash
                    log.debug("reading the keys' rests failed: %s", exc)
                await trio.sleep(COOLING_READ_S)
