"""The TLS context every provider connection of a worker starts from.

httpx builds one per transport, reading the CA bundle each time (about 50 ms of
CPU here); built once per process instead, and by the fork server before it
forks, a forked worker starts with it ready. httpx reads the same environment
(`SSL_CERT_FILE`, `SSL_CERT_DIR`) either way, and httpcore sets ALPN on it per
connection as it does on its own.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def client_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()
