"""Where a host name or address is: this machine only, a private network, or anywhere.

One judgement for the config (may a listen go without a key?) and the workers (is a
refused connection a local server that is not running?), made on addresses, never on
how they are spelt: `127.1.2.3`, `::1` and `::ffff:127.0.0.1` are all loopback.
"""

from __future__ import annotations

import ipaddress

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _address(host: str) -> Address | None:
    """The address `host` spells (brackets and an IPv6 zone allowed), IPv4-mapped IPv6
    as its IPv4 address; None for a name."""
    try:
        address = ipaddress.ip_address(host.strip("[]").partition("%")[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _is_localhost_name(host: str) -> bool:
    # RFC 6761: `localhost` and every name under it resolve to loopback.
    name = host.lower().rstrip(".")
    return name == "localhost" or name.endswith(".localhost")


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach `host`. `0.0.0.0` and `::` are not: a listen
    on them takes every interface, and that is public."""
    if _is_localhost_name(host):
        return True
    address = _address(host)
    return address is not None and address.is_loopback


def is_this_machine(host: str) -> bool:
    """Whether a connection to `host` goes to this machine: loopback, or the unspecified
    address, which a connect reaches this machine through (`OLLAMA_HOST=0.0.0.0`)."""
    address = _address(host)
    return is_loopback(host) or (address is not None and address.is_unspecified)


def is_local(host: str) -> bool:
    """This machine or a private network (RFC 1918, link-local, unique-local IPv6)."""
    if is_this_machine(host):
        return True
    address = _address(host)
    return address is not None and (address.is_private or address.is_link_local)
