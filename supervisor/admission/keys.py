"""Who a control connection is: the named client key its hello's token names, the
front door (the daemon's per-start secret), the daemon's own TRUNKLINE_TOKEN, or
nobody in particular.

Tokens are compared as SHA-256 digests against every known one each time, in
constant time, so neither the answer's time nor its content says anything of a key.
"""

from __future__ import annotations

import hashlib
import hmac

#: What `identify` answers for the front door's secret (not a valid key name).
DOOR = "\x00door"
#: ... and for the daemon's TRUNKLINE_TOKEN: a connection with no named key.
UNNAMED = ""


class ClientKeys:
    """The tokens a hello may give. `named`: key name -> key (`clients:`); `token`: the
    daemon's TRUNKLINE_TOKEN; `door_secret`: what the front door's processes say."""

    def __init__(self, named: dict[str, str], *, token: str | None = None, door_secret: str | None = None) -> None:
        known: list[tuple[bytes, str]] = [(_digest(key), name) for name, key in named.items()]
        if token:
            known.append((_digest(token), UNNAMED))
        if door_secret:
            known.append((_digest(door_secret), DOOR))
        self._known = known
        self.names = frozenset(named)

    def identify(self, token: str) -> str | None:
        """`DOOR`, a key's name, `UNNAMED` (the daemon's token), or None: no known token."""
        digest = _digest(token)
        found: str | None = None
        for known, who in self._known:
            if hmac.compare_digest(digest, known):
                found = who
        return found


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()
