"""The front door's process: hypercorn on trio, on the socket the daemon bound.

It connects to the daemon as a client (the control endpoint it was given), then
serves, then says `ready` on its link to the supervisor. It stops when told
(SIGTERM: hypercorn lets the requests in flight finish) or when its supervisor
goes (the link's end of file), so it never outlives the daemon.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
from functools import partial
from typing import cast

import msgspec
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve
from hypercorn.typing import ASGIFramework

from ..client import Client
from ..config.loader import ConfigError, FrontDoorSettings
from .app import FrontDoor, Keys, Limits
from .routes import routes

log = logging.getLogger("trunkline.frontdoor")

#: Seconds the requests in flight may take to finish once the process is told to stop.
GRACE_S = 10.0


def hypercorn_config(settings: FrontDoorSettings) -> HypercornConfig:
    http = settings.http
    config = HypercornConfig()
    config.bind = [f"fd://{settings.listen_fd}"]
    config.keep_alive_timeout = http.idle_timeout_s
    config.read_timeout = int(http.read_timeout_s) or 1
    config.h11_max_incomplete_size = http.max_header_bytes
    config.h2_max_header_list_size = http.max_header_bytes
    config.include_server_header = False
    config.graceful_timeout = GRACE_S
    config.accesslog = None
    config.errorlog = log
    return config


async def serve(settings: FrontDoorSettings) -> None:
    link = socket.socket(fileno=settings.link_fd)
    link.setblocking(False)
    keys = Keys(settings.http.keys(), {name: entry.key(name) for name, entry in settings.clients.items()})
    stop = trio.Event()
    # The daemon's secret for its door (it trusts the client key a request names only
    # from connections that gave it); without one, the daemon's own token if any.
    async with Client(
        control_endpoint=settings.control,
        client_name=f"trunkline-http-{settings.index}",
        token=settings.door_secret or None,
    ) as client:
        door = FrontDoor(client, routes(), keys, Limits(max_body_bytes=settings.http.max_body_bytes))
        # ASGI 3 either way: hypercorn types scopes and messages as its TypedDicts, the
        # application reads them as plain mappings.
        app = cast(ASGIFramework, door)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_on_signal, stop)
            await nursery.start(partial(hypercorn_serve, app, hypercorn_config(settings), shutdown_trigger=stop.wait))
            await trio.lowlevel.wait_writable(link)
            link.send(b"ready\n")
            nursery.start_soon(_stop_when_the_supervisor_goes, link, stop)
            await stop.wait()
            # hypercorn drains what is in flight (graceful_timeout), then returns.
            nursery.cancel_scope.deadline = trio.current_time() + GRACE_S + 1


async def _stop_on_signal(stop: trio.Event) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            stop.set()
            return


async def _stop_when_the_supervisor_goes(link: socket.socket, stop: trio.Event) -> None:
    while True:
        await trio.lowlevel.wait_readable(link)
        try:
            data = link.recv(64)
        except BlockingIOError:
            continue
        except OSError:
            data = b""
        if not data:
            log.info("the daemon has gone: stopping")
            stop.set()
            return


def main() -> int:
    settings = msgspec.json.decode(os.environ["TRUNKLINE_FRONTDOOR"], type=FrontDoorSettings)
    logging.basicConfig(
        level=settings.log_level.upper(), format=f"%(asctime)s http[{settings.index}] %(levelname)s %(message)s"
    )
    try:
        trio.run(serve, settings)
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    return 0
