"""The parts of a network endpoint URL (`tcp://host:port`, `tls+tcp://[::1]:port`)
the client needs: the host to verify, the port to reach, and the event endpoint to
dial when the daemon announces a wildcard address."""

from __future__ import annotations

from .protocol import nng


def host_of(url: str) -> str:
    """The host part of a network endpoint URL (brackets of an IPv6 address removed)."""
    rest = url.partition("://")[2]
    if rest.startswith("["):
        return rest[1 : rest.index("]")]
    return rest.rpartition(":")[0] if ":" in rest else rest


def port_of(url: str) -> int:
    """The port of a network endpoint URL (0 when it has none)."""
    port = url.partition("://")[2].rpartition(":")[2]
    return int(port) if port.isdigit() else 0


def event_url(announced: str, control: str) -> str:
    """The event endpoint to dial: as the daemon announced it, except that a wildcard
    listening address (`0.0.0.0`, `::`, `*`) is replaced by the host the control
    endpoint was reached at."""
    head, sep, rest = announced.partition("://")
    if not sep or nng.ipc_path(announced) is not None:
        return announced
    host, colon, port = rest.rpartition(":")
    if colon and host.strip("[]") in ("0.0.0.0", "::", "*", ""):
        control_host = host_of(control)
        if ":" in control_host:
            control_host = f"[{control_host}]"
        return f"{head}://{control_host}:{port}"
    return announced


def plain_tcp_hint(url: str) -> str:
    """For a plain tcp endpoint: the daemon may be listening with TLS there."""
    head, _, rest = url.partition("://")
    if head not in ("tcp", "tcp4", "tcp6"):
        return ""
    return f"; the daemon may expect TLS (tls+{head}://{rest}, with the CA that signed its certificate)"
