"""The supervisor <-> fork server exchange (`supervisor/forkserver.py` asks,
`workers/_forkserver.py` forks).

One SOCK_SEQPACKET socket pair, so each message is one datagram and needs no
framing; a fork request carries the new worker's end of its link as SCM_RIGHTS.
The fork server says `Ready` once it has imported everything a worker needs,
then answers each `Fork` in order with `Forked` (the worker's pid, once the
worker is the supervisor's own child) or `Refused`.
"""

from __future__ import annotations

import msgspec

#: The descriptor a forked worker finds its link on (its settings say `fd:3`).
LINK_FD = 3
#: Largest message: a fork request holds the worker's whole environment.
MAX_MESSAGE = 1024 * 1024


class Fork(msgspec.Struct, tag="fork"):
    """Start a worker: `name` for `ps`, `env` its whole environment (its settings in
    TRUNKLINE_WORKER, its own provider's key and nobody else's)."""

    name: str
    env: dict[str, str]


class Ready(msgspec.Struct, tag="ready"):
    pid: int


class Forked(msgspec.Struct, tag="forked"):
    pid: int


class Refused(msgspec.Struct, tag="refused"):
    reason: str


FromForkServer = Ready | Forked | Refused

encode = msgspec.msgpack.Encoder().encode
_requests = msgspec.msgpack.Decoder(Fork)
_replies: msgspec.msgpack.Decoder[FromForkServer] = msgspec.msgpack.Decoder(FromForkServer)
decode_request = _requests.decode
decode_reply = _replies.decode
