"""The one codec: msgpack for every message, and the event framing.

A message on the event socket is the topic (the submitting client's
`client_id`, or `bus`) in UTF-8, one NUL byte, then either one msgpack event
(a map) or a msgpack array of events of that topic, in order. Subscribers
filter on the topic prefix; include the NUL in the subscription so that `c1`
does not also match `c12`.

Why arrays: nng's Pub0 sends every message to every subscriber connection
(subscribers filter on their side), each send through nng's threads, so with
many subscribers the cost is per message: the events a worker relays at once
go out as one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from .limits import MAX_NESTING, request_problem
from .messages import AnyEvent, ControlReply, ControlRequest, FromWorker, Request, ToWorker

T = TypeVar("T")

_encoder = msgspec.msgpack.Encoder()
encode = _encoder.encode

# Annotated: msgspec types a Decoder of a union as a Decoder of Any.
_control_requests: msgspec.msgpack.Decoder[ControlRequest] = msgspec.msgpack.Decoder(ControlRequest)
_control_replies: msgspec.msgpack.Decoder[ControlReply] = msgspec.msgpack.Decoder(ControlReply)
_events: msgspec.msgpack.Decoder[AnyEvent] = msgspec.msgpack.Decoder(AnyEvent)
_event_lists: msgspec.msgpack.Decoder[list[AnyEvent]] = msgspec.msgpack.Decoder(list[AnyEvent])
_to_worker: msgspec.msgpack.Decoder[ToWorker] = msgspec.msgpack.Decoder(ToWorker)
_from_worker: msgspec.msgpack.Decoder[FromWorker] = msgspec.msgpack.Decoder(FromWorker)
_request = msgspec.msgpack.Decoder(Request)


class DecodeError(ValueError):
    """Bytes that are not a valid message of the expected family."""


def _decoder(dec: msgspec.msgpack.Decoder[T]) -> Callable[[bytes | bytearray | memoryview], T]:
    def decode(data: bytes | bytearray | memoryview) -> T:
        try:
            return dec.decode(data)
        except msgspec.ValidationError as exc:
            raise DecodeError(f"invalid message: {exc}") from None
        except msgspec.DecodeError as exc:
            raise DecodeError(f"malformed msgpack: {exc}") from None
        except UnicodeDecodeError as exc:
            raise DecodeError(f"a string is not valid UTF-8 (byte {exc.start} of it)") from None
        except RecursionError:
            raise DecodeError(f"nested too deeply (free-form JSON may nest {MAX_NESTING} levels)") from None

    return decode


_decode_control_request = _decoder(_control_requests)


def decode_control_request(data: bytes | bytearray | memoryview) -> ControlRequest:
    """A control request whose free-form JSON holds only what JSON can (see
    `limits`), nested at most `MAX_NESTING` levels deep (deeper would break
    re-encoding it for a worker)."""
    msg = _decode_control_request(data)
    request = getattr(msg, "request", None)
    if type(request) is Request:
        problem = request_problem(request, numbers=False)
        if problem is not None:
            raise DecodeError(f"request.{problem}")
    return msg


decode_control_reply = _decoder(_control_replies)
decode_event = _decoder(_events)
_decode_event_list = _decoder(_event_lists)


def decode_events(body: bytes | bytearray | memoryview) -> list[AnyEvent]:
    """The events of one event message's body (after the topic and NUL): one map, or
    an array of them."""
    if not len(body):
        raise DecodeError("empty event message")
    first = body[0]
    if 0x90 <= first <= 0x9F or first in (0xDC, 0xDD):
        return _decode_event_list(body)
    return [decode_event(body)]


decode_to_worker = _decoder(_to_worker)
decode_from_worker = _decoder(_from_worker)
decode_request = _decoder(_request)

SEPARATOR = b"\x00"
BUS_TOPIC = "bus"


def frame_event(topic: str, event: Any) -> bytes:
    """`topic \\x00 msgpack(event)`, ready for the event socket."""
    return topic.encode() + SEPARATOR + _encoder.encode(event)


#: Events per batched message at most, and its size (a single larger event goes
#: alone): a subscriber's queue counts messages, so this bounds what one message
#: in it holds, and a message stays a size every client reads comfortably.
BATCH_EVENTS = 256
BATCH_BYTES = 64 * 1024


def batch_frames(frames: list[bytes]) -> list[bytes]:
    """Frames of one topic (`topic \\x00 event`) as few messages as the bounds allow:
    each `topic \\x00` + a msgpack array of up to BATCH_EVENTS events and about
    BATCH_BYTES bytes, or a lone frame as it is."""
    if len(frames) == 1:
        return frames
    first = frames[0]
    cut = first.index(SEPARATOR) + 1
    prefix = first[:cut]
    out: list[bytes] = []
    chunk: list[bytes] = []  # whole frames
    size = 0

    def close() -> None:
        n = len(chunk)
        if n == 1:
            out.append(chunk[0])  # as it is: a large event is never copied here
        elif n:
            head = bytes((0x90 | n,)) if n < 16 else b"\xdc" + n.to_bytes(2, "big")
            out.append(b"".join([prefix, head, *(memoryview(f)[cut:] for f in chunk)]))

    for frame in frames:
        body_size = len(frame) - cut
        if chunk and (len(chunk) == BATCH_EVENTS or size + body_size > BATCH_BYTES):
            close()
            chunk, size = [], 0
        chunk.append(frame)
        size += body_size
    close()
    return out


def topic_prefix(topic: str) -> bytes:
    """What a subscriber subscribes to for exactly this topic."""
    return topic.encode() + SEPARATOR


def split_frame(frame: bytes | bytearray | memoryview) -> tuple[str, memoryview]:
    """The topic and the event bytes of one frame."""
    view = memoryview(frame)
    cut = bytes(view[:256]).find(SEPARATOR)
    if cut < 0:
        raise DecodeError("event frame has no topic separator")
    return bytes(view[:cut]).decode(), view[cut + 1 :]


def to_builtins(obj: Any) -> Any:
    """Plain dicts and lists, as another language's msgpack library would see them."""
    return msgspec.to_builtins(obj)
