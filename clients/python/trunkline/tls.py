"""TLS for the client: the settings a `tls+tcp://` endpoint needs, and why a
handshake failed, in words.

nng's TLS (mbedTLS inside pynng) reports every failed handshake as the same
"Cryptographic error". After such a failure the client shakes hands once more
with Python's own `ssl` module, against the same CA and server name, only to
name the cause: a certificate signed by another CA, one issued for another
name, or an endpoint that does not speak TLS at all. Nothing is sent on that
connection, and a handshake `ssl` accepts says nothing (the caller keeps its
general message).
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass

import anyio

from .endpoints import host_of, port_of
from .errors import TLSError
from .protocol import nng

#: OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH.
_NAME_MISMATCH = (62, 64)


def handshake_problem(host: str, port: int, ca_file: str, server_name: str, timeout_s: float = 3.0) -> str | None:
    """The cause of a failed handshake with `host:port` and what to change, or None when
    `ssl` cannot tell (or cannot reach the endpoint at all). Blocking: call it from a thread."""
    try:
        context = ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError, ValueError) as exc:
        return f"the CA file {ca_file} holds no certificate that can be used ({exc})"
    try:
        with (
            socket.create_connection((host, port), timeout=timeout_s) as raw,
            context.wrap_socket(raw, server_hostname=server_name),
        ):
            return None
    except ssl.SSLCertVerificationError as exc:
        if exc.verify_code in _NAME_MISMATCH:
            return (
                f"the daemon's certificate is not issued for {server_name!r}; name the host it was issued for "
                "with tls_server_name (--tls-server-name, TRUNKLINE_TLS_SERVER_NAME)"
            )
        return (
            f"the daemon's certificate is not signed by the CA in {ca_file} ({exc.verify_message or exc.reason}); "
            "give the CA that signed it with tls_ca_file (--tls-ca-file, TRUNKLINE_TLS_CA_FILE)"
        )
    except (ssl.SSLEOFError, ConnectionResetError, ssl.SSLZeroReturnError):
        return "the endpoint closed the connection during the handshake: it may not speak TLS (a tcp:// endpoint?)"
    except ssl.SSLError as exc:
        if exc.reason in ("WRONG_VERSION_NUMBER", "UNKNOWN_PROTOCOL", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"):
            return "the endpoint does not speak TLS (a tcp:// endpoint?)"
        return None
    except OSError:
        return None


def refused_handshake(exc: BaseException) -> bool:
    """Whether a failed dial is a failed TLS handshake (as opposed to nothing listening)."""
    text = f"{type(exc).__name__} {exc}".lower()
    return any(word in text for word in ("crypto", "auth", "certificate", "peer"))


def closed_early(exc: BaseException) -> bool:
    """The peer closed a plain connection during nng's own handshake: what a TLS
    endpoint does with a client that does not start TLS."""
    text = f"{type(exc).__name__} {exc}".lower()
    return "shutdown" in text or "closed" in text or "reset" in text


@dataclass(frozen=True)
class ClientTLS:
    """A client's TLS settings: the CA that signed the daemon's certificate (the
    server is always verified), the name that certificate must carry (the endpoint's
    host when unset), and optionally the client's own certificate and key."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None

    def config(self, url: str) -> nng.TLSConfig | None:
        """nng's TLS configuration for dialling `url` (None for an endpoint without TLS)."""
        if not nng.is_tls(url):
            return None
        if not self.ca_file:
            # nng's TLS has no system store: without a CA nothing would be verified.
            raise TLSError(
                f"{url} is a TLS endpoint: give the CA that signed the daemon's certificate "
                "(Client(tls_ca_file=...), --tls-ca-file or TRUNKLINE_TLS_CA_FILE)"
            )
        try:
            return nng.client_tls(self.ca_file, self.cert_file, self.key_file, self.server_name or host_of(url))
        except OSError as exc:
            raise TLSError(
                f"cannot read the TLS files for {url} ({exc.filename or self.ca_file}: {exc.strerror or exc})"
            ) from None
        except (ValueError, nng.NNGException) as exc:
            raise TLSError(
                f"cannot set up TLS for {url}: the CA file {self.ca_file} (or the client's certificate "
                f"and key) holds nothing nng can read as a PEM certificate ({exc})"
            ) from None

    async def handshake_cause(self, url: str, exc: BaseException) -> TLSError | None:
        """The error for a failed handshake with `url` if `ssl` can name its cause, else None."""
        name = self.server_name or host_of(url)
        assert self.ca_file is not None  # `config` refuses a TLS endpoint without one
        why = await anyio.to_thread.run_sync(handshake_problem, host_of(url), port_of(url), self.ca_file, name)
        return None if why is None else TLSError(f"the TLS handshake with {url} failed ({exc}): {why}")

    async def handshake_failed(self, url: str, exc: BaseException) -> TLSError:
        """The error for a failed handshake with `url`, naming its cause when `ssl` can tell it."""
        named = await self.handshake_cause(url, exc)
        if named is not None:
            return named
        name = self.server_name or host_of(url)
        ca_file = self.ca_file
        why = (
            f"this client could not verify the daemon's certificate as one for {name!r} signed by the CA in "
            f"{ca_file}; check tls_ca_file (--tls-ca-file, TRUNKLINE_TLS_CA_FILE) and tls_server_name "
            "(--tls-server-name, TRUNKLINE_TLS_SERVER_NAME)"
        )
        return TLSError(f"the TLS handshake with {url} failed ({exc}): {why}")
