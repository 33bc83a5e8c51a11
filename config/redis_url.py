"""A `shared_state.redis` URL: `redis://[user:pass@]host[:port][/db]`, or `rediss://`
for TLS. Parsed here, where the loader checks it at start and the supervisor's Redis
client reads it; the password never reaches a message.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote, urlsplit


class BadRedisUrl(ValueError):
    """A `shared_state.redis` URL that cannot be used (the message never holds its password)."""


@dataclass(frozen=True, slots=True)
class RedisTarget:
    host: str
    port: int
    db: int
    tls: bool
    username: str | None
    password: str | None

    def redacted(self) -> str:
        """The URL to show in status and logs: never the password."""
        scheme = "rediss" if self.tls else "redis"
        user = f"{self.username}:***@" if self.username else ("***@" if self.password else "")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{scheme}://{user}{host}:{self.port}/{self.db}"


def parse_url(url: str) -> RedisTarget:
    """`redis://[user:pass@]host[:port][/db]` or `rediss://` (TLS)."""
    try:
        parts = urlsplit(url)
        port = parts.port or 6379
    except ValueError as exc:
        raise BadRedisUrl(f"not a redis URL ({_without_secret(str(exc), url)})") from None
    if parts.scheme not in ("redis", "rediss"):
        raise BadRedisUrl(f"the scheme must be redis:// or rediss://, not {parts.scheme or 'none'!r}")
    if not parts.hostname:
        raise BadRedisUrl("the URL names no host (redis://host:port/db)")
    path = parts.path.strip("/")
    if path and not path.isdigit():
        raise BadRedisUrl(f"the path must be a database number (/0), not /{path[:20]}")
    return RedisTarget(
        host=parts.hostname,
        port=port,
        db=int(path or 0),
        tls=parts.scheme == "rediss",
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
    )


def _without_secret(text: str, url: str) -> str:
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    return text.replace(password, "***") if password else text
