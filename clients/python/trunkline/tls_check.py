"""Why a TLS handshake with the daemon failed, in words.

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
