"""The client the module-level functions use when none is given.

`set_default_client(client)` names one. Without it, the first call connects a
`Client()` to the local daemon (the CLI's runtime-directory rules:
`TRUNKLINE_RUNTIME_DIR`, then `$XDG_RUNTIME_DIR/trunkline`, then
`/tmp/trunkline-<uid>`), one per event loop; with TRUNKLINE_AUTOSTART=1 it starts
the daemon of the user's config when none answers. It lives in a task of its own (a
trio system task, an asyncio task), because a client's reader must outlive the
call that happened to connect it; that task ends, closing the client, when the
event loop finishes (`trio.run` or `asyncio.run` returns).
"""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import sniffio

from .client import Client

_explicit: Client | None = None
# Keyed by the running loop's identity object (trio's root task, the asyncio loop);
# the key is held, so its id can never be reused by a later loop.
_lazy: dict[Any, _Slot] = {}


class _Slot:
    def __init__(self) -> None:
        self.ready = anyio.Event()
        self.client: Client | None = None
        self.error: BaseException | None = None
        self.task: object = None  # asyncio keeps only weak references to tasks: held here


def set_default_client(client: Client | None) -> None:
    """The client module-level calls use from now on (None: back to connecting one lazily)."""
    global _explicit
    _explicit = client


def _loop_key() -> tuple[str, Any]:
    library = sniffio.current_async_library()
    if library == "trio":
        import trio

        return library, trio.lowlevel.current_root_task()
    import asyncio

    return library, asyncio.get_running_loop()


async def get_client(client: Client | None = None) -> Client:
    """`client`, else the default one (connecting it on first use)."""
    if client is not None:
        return client
    if _explicit is not None:
        return _explicit
    key = _loop_key()
    slot = _lazy.get(key)
    if slot is None:
        slot = _lazy[key] = _Slot()
        _spawn(key[0], slot)
    await slot.ready.wait()
    if slot.client is None:
        if _lazy.get(key) is slot:
            del _lazy[key]  # the next call tries again (the daemon may be up by then)
        assert slot.error is not None
        raise slot.error
    return slot.client


def _spawn(library: str, slot: _Slot) -> None:
    if library == "trio":
        import trio

        trio.lowlevel.spawn_system_task(_hold, slot, name="trunkline default client")
    else:
        import asyncio

        task = asyncio.get_running_loop().create_task(_hold(slot), name="trunkline default client")
        slot.task = task


async def _hold(slot: _Slot) -> None:
    client = Client()
    try:
        await client.__aenter__()
    except Exception as exc:  # noqa: BLE001 - handed to the caller; a system task must not raise
        slot.error = exc
        slot.ready.set()
        return
    slot.client = client
    slot.ready.set()
    try:
        await anyio.sleep_forever()
    finally:
        # Cancelled as the loop ends: close for real (aclose awaits a goodbye). The
        # client's own tasks were cancelled from outside too and report it as a group,
        # which a trio system task must not raise: the loop is ending anyway.
        with anyio.CancelScope(shield=True), contextlib.suppress(BaseException):
            await client.aclose()


__all__ = ["get_client", "set_default_client"]
