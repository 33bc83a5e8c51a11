"""Gemini `GenerateContentResponse` chunks -> canonical events: a pure state machine.

Every chunk is a whole response object holding the next parts of candidate 0;
parts of one kind that follow each other (text, or thought text) continue one
canonical part, as Gemini splits one part across chunks. What belongs to a
part but has no canonical field, its `thoughtSignature`, follows it as a
`ProviderPartEvent(kind="thoughtSignature")` tied to the model; parts with no
canonical type at all (code execution, server tool calls, inline output) come
as a `ProviderPartEvent` holding the part verbatim. Function calls arrive
whole, or (Vertex, Gemini 3+) piecewise by JSON path; either way they become
start, argument deltas, end. `usageMetadata` repeats as running totals: the
last one wins. A body can be SSE (`alt=sse`, CRLF between events), one JSON
array streamed over many lines, or one whole object; the pipeline's framing
(`SseOrJsonDecoder`) tells them apart by the first byte.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from ...protocol.messages import (
    Event,
    FinishReason,
    ProviderEvent,
    ProviderPartEvent,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    Response,
    StreamStart,
    TextDelta,
    TextEnd,
    TextStart,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
    WarningInfo,
)
from .._contract import Ending
from .._sse import excerpt
from .._warnings import warn
from ..errors import ProviderError, invalid_response
from .errors import from_error_object
from .partial_args import PartialArgs
from .response import BLOCK_NUMBERS, FINISH_NUMBERS, enum_name, finish_reason, usage

API = "gemini"
SIGNATURE_KIND = "thoughtSignature"
#: Candidate-level results kept as provider parts for the caller; not parts, so never sent back.
METADATA_KINDS = ("groundingMetadata", "urlContextMetadata")


class _Open:
    __slots__ = ("args", "chunks", "id", "index", "kind", "name", "signature")

    def __init__(self, kind: str, index: int, name: str = "", id: str | None = None) -> None:
        self.kind = kind  # text | reasoning | tool
        self.index = index
        self.chunks: list[str] = []
        self.name = name
        self.id = id
        self.signature: str | None = None
        self.args: PartialArgs | None = None


class GeminiStream:
    def __init__(self, model: str = "", passthrough: bool = False) -> None:
        #: the wire model the request named: signatures are bound to it
        self.model = model
        self.passthrough = passthrough
        self.warnings: list[WarningInfo] = []
        self._next = 0
        self._open: _Open | None = None
        self._usage: dict[str, Any] = {}
        self._model_version = ""
        self._id = ""
        self._finish: str | None = None
        self._finish_message = ""
        self._blocked: list[str] = []
        self._prompt_block: str | None = None
        self._calls = 0
        self._started = False
        self._continuation: str | None = None
        self._earlier_hops: list[Usage] = []
        self._metadata: dict[str, Any] = {}  # candidate-level grounding (search, URL context), the last seen

    def feed(self, data: bytes, event: str = "message") -> list[Event]:
        try:
            payload = msgspec.json.decode(data)
        except msgspec.DecodeError:
            raise invalid_response(f"Gemini sent a chunk that is not JSON: {excerpt(data)!r}") from None
        if not isinstance(payload, dict):
            raise invalid_response(f"Gemini sent a chunk that is not an object: {str(payload)[:200]}")
        error = payload.get("error")
        if isinstance(error, dict):
            raise from_error_object(error)
        out: list[Event] = []
        if payload.get("modelVersion"):
            self._model_version = str(payload["modelVersion"])
        if payload.get("responseId"):
            self._id = str(payload["responseId"])
        if not self._started:
            self._started = True
            out.append(StreamStart(model=self._model_version))
        meta = payload.get("usageMetadata")
        if isinstance(meta, dict) and any(k.endswith("Count") for k in meta):
            self._usage = meta
        feedback = payload.get("promptFeedback")
        if isinstance(feedback, dict) and feedback.get("blockReason") is not None:
            self._prompt_block = enum_name(feedback["blockReason"], BLOCK_NUMBERS)
            self._note_blocked(feedback.get("safetyRatings"))
        candidates = payload.get("candidates")
        if isinstance(candidates, list):
            for candidate in candidates:
                if isinstance(candidate, dict) and int(candidate.get("index") or 0) == 0:
                    out += self._candidate(candidate)
                    break
        if self.passthrough:
            out.append(_passthrough(payload))
        return out

    # -- one candidate ---------------------------------------------------------------

    def _candidate(self, candidate: dict[str, Any]) -> list[Event]:
        out: list[Event] = []
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in parts if isinstance(parts, list) else ():
            if isinstance(part, dict):
                out += self._part(part)
        if candidate.get("finishReason") is not None:
            self._finish = enum_name(candidate["finishReason"], FINISH_NUMBERS)
            self._finish_message = str(candidate.get("finishMessage") or "")
        if candidate.get("continuationToken"):
            self._continuation = str(candidate["continuationToken"])
        for key in METADATA_KINDS:
            if candidate.get(key):
                self._metadata[key] = candidate[key]
        self._note_blocked(candidate.get("safetyRatings"))
        return out

    def _note_blocked(self, ratings: Any) -> None:
        for rating in ratings if isinstance(ratings, list) else ():
            if isinstance(rating, dict) and rating.get("blocked"):
                category = str(rating.get("category") or "unknown")
                if category not in self._blocked:
                    self._blocked.append(category)

    def _part(self, part: dict[str, Any]) -> list[Event]:
        signature = part.get("thoughtSignature")
        if isinstance(part.get("functionCall"), dict):
            return self._function_call(part["functionCall"], signature)
        if "text" in part or part.get("thought"):
            return self._text(part, str(part.get("text") or ""), signature)
        out = self._close()
        kind = next((k for k in part if k not in ("thoughtSignature", "thought")), "part")
        out.append(self._verbatim(kind, part))
        return out

    def _text(self, part: dict[str, Any], text: str, signature: str | None) -> list[Event]:
        kind = "reasoning" if part.get("thought") else "text"
        out: list[Event] = []
        if text:
            if self._open is not None and self._open.kind != kind:
                out += self._close()
            if self._open is None:
                self._open = _Open(kind, self._take_index())
                out.append(
                    TextStart(index=self._open.index) if kind == "text" else ReasoningStart(index=self._open.index)
                )
            self._open.chunks.append(text)
            out.append(
                TextDelta(index=self._open.index, text=text)
                if kind == "text"
                else ReasoningDelta(index=self._open.index, text=text)
            )
        if signature:
            if self._open is not None and self._open.kind in ("text", "reasoning"):
                # Gemini splits a part over chunks and may sign it in a trailing empty part.
                self._open.signature = signature
                out += self._close()
            else:
                out += self._close()
                out.append(self._verbatim("thought" if part.get("thought") else "text", part))
        return out

    def _function_call(self, call: dict[str, Any], signature: str | None) -> list[Event]:
        current = self._open
        if current is not None and current.kind == "tool" and not call.get("name"):
            # The next pieces of a call streamed by JSON path.
            out: list[Event] = []
            out += self._partial(current, call.get("partialArgs"))
            if signature:
                current.signature = signature
            if not call.get("willContinue"):
                out += self._close()
            return out
        out = self._close()
        name = str(call.get("name") or "")
        if not name:
            return out  # a bare closing `functionCall: {}` with nothing open
        call_id = str(call["id"]) if call.get("id") else None
        opened = _Open("tool", self._take_index(), name, call_id)
        opened.signature = signature
        self._open = opened
        out.append(ToolCallStart(index=opened.index, name=name, provider_id=call_id))
        if call.get("willContinue") or call.get("partialArgs"):
            out += self._partial(opened, call.get("partialArgs"))
            if not call.get("willContinue"):
                out += self._close()
            return out
        args = call.get("args")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise invalid_response(f"Gemini's function call {name!r} has args that are not an object: {args!r}")
        text = json.dumps(args, ensure_ascii=False) if args else ""
        if text:
            opened.chunks.append(text)
            out.append(ToolCallDelta(index=opened.index, partial_json=text))
        out += self._close(args)
        return out

    def _partial(self, current: _Open, fragments: Any) -> list[Event]:
        if current.args is None:
            current.args = PartialArgs()
        out: list[Event] = []
        for fragment in fragments if isinstance(fragments, list) else ():
            if isinstance(fragment, dict):
                text = current.args.feed(fragment)
                if text:
                    current.chunks.append(text)
                    out.append(ToolCallDelta(index=current.index, partial_json=text))
        return out

    # -- parts opening and closing ----------------------------------------------------

    def _take_index(self) -> int:
        index = self._next
        self._next += 1
        return index

    def _verbatim(self, kind: str, part: dict[str, Any]) -> ProviderPartEvent:
        tied = self.model if part.get("thoughtSignature") else None
        return ProviderPartEvent(index=self._take_index(), api=API, kind=kind, data=part, model=tied)

    def _close(self, args: dict[str, Any] | None = None) -> list[Event]:
        current, self._open = self._open, None
        if current is None:
            return []
        out: list[Event] = []
        if current.kind == "text":
            out.append(TextEnd(index=current.index, text="".join(current.chunks)))
        elif current.kind == "reasoning":
            out.append(ReasoningEnd(index=current.index, text="".join(current.chunks)))
        else:
            if current.args is not None:  # streamed by path: close the JSON text, take the object
                tail = current.args.finish()
                if tail:
                    current.chunks.append(tail)
                    out.append(ToolCallDelta(index=current.index, partial_json=tail))
                args = current.args.value
            self._calls += 1
            out.append(
                ToolCallEnd(
                    index=current.index,
                    name=current.name,
                    provider_id=current.id,
                    arguments=args or {},
                    raw_arguments="".join(current.chunks),
                )
            )
        if current.signature:
            out.append(
                ProviderPartEvent(
                    index=self._take_index(), api=API, kind=SIGNATURE_KIND, data=current.signature, model=self.model
                )
            )
        return out

    # -- continuations (long decode) ----------------------------------------------------

    def take_continuation(self) -> str | None:
        """After a hop's body ended: the token to send back when the model stopped at its
        per-request limit but is not done (finish CONTINUATION). The parts stay open, so
        the next hop's output continues them, and this hop's usage is kept to be summed."""
        token = self._continuation
        if token is None or self._finish != "CONTINUATION":
            return None
        self._earlier_hops.append(usage(self._usage))
        self._usage = {}
        self._finish = None
        self._finish_message = ""
        self._continuation = None
        return token

    # -- the end ----------------------------------------------------------------------

    def finish(self) -> Ending:
        """The events that close what is still open, and the finish skeleton."""
        events = self._close()
        # Search and URL-context grounding (sources, citations) is the candidate's, not a
        # part's: it comes last, for the caller, and is never sent back.
        for kind, data in self._metadata.items():
            events.append(ProviderPartEvent(index=self._take_index(), api=API, kind=kind, data=data))
        self._metadata = {}
        raw = self._finish
        if raw is None and self._prompt_block is None:  # cut short: worth another attempt
            raise ProviderError("network", "the Gemini stream ended before a finish reason")
        if raw is None:
            reason = FinishReason(reason="content_filter", raw=self._prompt_block)
            warn(
                self.warnings,
                "content_filter",
                f"Gemini blocked the prompt ({self._prompt_block})"
                + (f": {', '.join(self._blocked)}" if self._blocked else ""),
            )
        else:
            reason = finish_reason(raw, self._calls > 0)
            if reason.reason == "content_filter":
                warn(
                    self.warnings,
                    "content_filter",
                    f"Gemini stopped the answer ({raw})" + (f": {', '.join(self._blocked)}" if self._blocked else ""),
                )
            elif raw == "CONTINUATION":
                warn(
                    self.warnings,
                    "truncated",
                    "Gemini had not finished (CONTINUATION); the answer was cut "
                    "after the most continuations one request may follow",
                )
            elif reason.reason == "error":
                warn(
                    self.warnings,
                    "degraded_finish",
                    f"Gemini ended the turn with {raw}"
                    + (f": {self._finish_message}" if self._finish_message else "")
                    + "; what arrived before it is kept",
                )
        total = usage(self._usage)
        for hop in self._earlier_hops:  # each hop is a request of its own: summed
            total = hop + total
        return Ending(
            events,
            Response(
                id=self._id, model=self._model_version, finish_reason=reason, usage=total, warnings=list(self.warnings)
            ),
        )


def _passthrough(payload: dict[str, Any]) -> Event:
    return ProviderEvent(provider=API, event_type="chunk", data=payload)
