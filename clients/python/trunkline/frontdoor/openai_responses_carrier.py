"""Reasoning that must come back on the next turn, carried in a reasoning item.

The door stores nothing, yet a conversation's reasoning has to reach the next turn
as its provider wrote it: Anthropic's thinking with its signature, redacted
thinking, OpenAI's own reasoning item with its `encrypted_content` (tied to a
model), Gemini's thought signatures, a provider's server-tool blocks. A Responses
client already keeps one thing opaque and sends it back: a reasoning item's
`encrypted_content`. So the canonical parts that need to survive the round trip
are sealed into it (msgpack, base64url, behind a prefix), and opened again, as
the same parts, when the item comes back.

The summaries stay readable beside it: each thinking or redacted part has one
`summary` entry, in order, and a thinking part's text travels there only (the
sealed copy has it blanked), so long thinking is not carried twice.

A reasoning item whose `encrypted_content` lacks the prefix was not written here
(a conversation begun directly against OpenAI): it is kept whole as OpenAI's own
opaque part, which the OpenAI worker sends back verbatim.
"""

from __future__ import annotations

import base64
import binascii

import msgspec

from ..protocol.messages import ContentPart, ProviderPart, RedactedThinkingPart, ThinkingPart

#: What a sealed `encrypted_content` starts with.
PREFIX = "trunkline.reasoning.1:"

Carried = ThinkingPart | RedactedThinkingPart | ProviderPart

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(list[Carried]).decode


class Unreadable(ValueError):
    """A sealed reasoning item that cannot be opened (changed, cut, or its summaries lost)."""


def needs_sealing(parts: list[Carried]) -> bool:
    """Whether the parts hold anything beyond readable text (plain thinking goes as summaries only)."""
    return any(not isinstance(p, ThinkingPart) or p.signature for p in parts)


def summaries(parts: list[Carried]) -> list[str]:
    """The `summary` texts: one per thinking or redacted part, in order."""
    return [p.text if isinstance(p, ThinkingPart) else "" for p in parts if not isinstance(p, ProviderPart)]


def seal(parts: list[Carried]) -> str:
    """`encrypted_content` holding `parts`, their thinking text left to the summaries."""
    blanked = [msgspec.structs.replace(p, text="") if isinstance(p, ThinkingPart) and p.text else p for p in parts]
    return PREFIX + base64.urlsafe_b64encode(_encode(blanked)).decode("ascii")


def is_sealed(encrypted: str) -> bool:
    return encrypted.startswith(PREFIX)


def open_sealed(encrypted: str, texts: list[str]) -> list[ContentPart]:
    """The parts `seal` was given, their thinking text taken back from `texts` (the summaries)."""
    try:
        parts = _decode(base64.urlsafe_b64decode(encrypted[len(PREFIX) :].encode("ascii")))
    except (binascii.Error, ValueError, msgspec.DecodeError) as exc:
        raise Unreadable(f"it is not what the front door wrote ({exc})") from None
    wanted = sum(1 for p in parts if not isinstance(p, ProviderPart))
    if wanted != len(texts):
        raise Unreadable(f"it carries {wanted} reasoning parts, but the item has {len(texts)} summaries")
    out: list[ContentPart] = []
    given = iter(texts)
    for part in parts:
        if isinstance(part, ThinkingPart):
            part.text = next(given)
        elif isinstance(part, RedactedThinkingPart):
            next(given)
        out.append(part)
    return out
