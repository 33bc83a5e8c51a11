"""`generate_object` and `stream_object`: a validated object from the model's native structured output.

The schema is a JSON Schema dict, a msgspec `Struct` type, or a pydantic model
class (when pydantic is installed; it is not a dependency). It goes to the
provider as `response_format` (`json_schema`), which each worker translates to
its provider's own structured output. The answer is parsed, checked against
the JSON Schema, and converted to the type given (a Struct, a pydantic
model; a dict for a dict schema). Failing that, `NoObjectGeneratedError`
carries the raw text and the reason. A schema failure is not retried: it says
how the model behaved, not that something transient went wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import msgspec

from .client import Client
from .errors import NoObjectGeneratedError
from .generation import GenerateStream, generate, stream
from .partial_json import parse_partial
from .protocol.messages import ErrorInfo, Message, Response, ResponseFormat, TextDelta
from .results import ObjectResult, StepFinish
from .tools import argument_errors, inline_root


@dataclass
class ObjectSchema:
    """A schema in the three forms the API takes, reduced to what is needed."""

    json_schema: dict[str, Any]
    name: str
    convert: Callable[[Any], Any]

    def response_format(self) -> ResponseFormat:
        return ResponseFormat(kind="json_schema", schema=self.json_schema, name=self.name, strict=True)

    def parse(self, text: str, response: Response | None) -> Any:
        def fail(reason: str) -> NoObjectGeneratedError:
            return NoObjectGeneratedError(
                ErrorInfo(error_class="invalid_response", message=f"no object generated: {reason}"),
                text=text,
                validation_error=reason,
                response=response,
            )

        try:
            value = json.loads(text)
        except ValueError as exc:
            raise fail(f"the answer is not JSON ({exc})") from None
        problems = argument_errors(self.json_schema, value)
        if problems is not None:
            raise fail(f"the answer does not fit the schema: {problems}")
        try:
            return self.convert(value)
        except Exception as exc:  # noqa: BLE001 - msgspec's or pydantic's own validation error
            raise fail(f"the answer does not convert to {self.name}: {exc}") from None


def object_schema(schema: Any) -> ObjectSchema:
    """An `ObjectSchema` from a JSON Schema dict, a msgspec Struct type or a pydantic model."""
    if isinstance(schema, dict):
        return ObjectSchema(schema, _name(schema.get("title") or "output"), lambda value: value)
    if isinstance(schema, type) and issubclass(schema, msgspec.Struct):
        struct = schema
        return ObjectSchema(
            inline_root(msgspec.json.schema(struct)),
            _name(struct.__name__),
            lambda value: msgspec.convert(value, struct),
        )
    if isinstance(schema, type) and hasattr(schema, "model_json_schema") and hasattr(schema, "model_validate"):
        model = schema  # pydantic v2, recognised by its methods so pydantic is never imported here
        return ObjectSchema(model.model_json_schema(), _name(model.__name__), model.model_validate)
    raise TypeError(
        f"schema must be a JSON Schema dict, a msgspec Struct type or a pydantic model class, not {schema!r}"
    )


def _name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)[:64] or "output"


async def generate_object(
    model: str,
    prompt: str | Message | None = None,
    *,
    schema: Any,
    messages: Sequence[Message] | None = None,
    system: str | None = None,
    client: Client | None = None,
    **fields: Any,
) -> ObjectResult:
    """Ask `model` for an object fitting `schema`; the validated object is `.object`.
    Other keywords are `generate`'s (`tools`, `max_tokens`, `provider_options`...)."""
    spec = object_schema(schema)
    result = await generate(
        model, prompt, messages=messages, system=system, client=client, response_format=spec.response_format(), **fields
    )
    return ObjectResult(object=spec.parse(result.text, result.response), result=result)


def stream_object(
    model: str,
    prompt: str | Message | None = None,
    *,
    schema: Any,
    messages: Sequence[Message] | None = None,
    system: str | None = None,
    client: Client | None = None,
    **fields: Any,
) -> ObjectStream:
    """`generate_object`, streamed: `async for partial in s` gives the object as far as
    its JSON has arrived (dicts and lists, not yet validated); `await s.object()` the
    validated whole."""
    spec = object_schema(schema)
    events = stream(
        model, prompt, messages=messages, system=system, client=client, response_format=spec.response_format(), **fields
    )
    return ObjectStream(spec, events)


class ObjectStream:
    def __init__(self, spec: ObjectSchema, events: GenerateStream) -> None:
        self.spec = spec
        self.events = events
        self._text: list[str] = []
        self._partials = self._run()
        self._object: Any = None
        self._result: ObjectResult | None = None

    async def __aenter__(self) -> ObjectStream:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.events.aclose()

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._partials

    async def _run(self) -> AsyncIterator[Any]:
        shown: Any = None
        async for event in self.events:
            if type(event) is StepFinish:
                self._text.clear()  # the object is the last step's answer
            if type(event) is not TextDelta:
                continue
            self._text.append(event.text)
            # The whole text so far is parsed again: objects are small, and a parser that
            # resumes would have to undo its guesses about cut-off strings and numbers.
            try:
                partial = parse_partial("".join(self._text))
            except ValueError:
                continue  # not JSON (yet): `object()` will say so
            if partial is not None and partial != shown:
                shown = partial
                yield partial

    async def result(self) -> ObjectResult:
        """Run to the end; the validated object with its loop (`.object`, `.response`)."""
        if self._result is None:
            async for _ in self._partials:
                pass
            result = await self.events.result()
            self._result = ObjectResult(object=self.spec.parse(result.text, result.response), result=result)
        return self._result

    async def object(self) -> Any:
        return (await self.result()).object


__all__ = ["ObjectSchema", "ObjectStream", "generate_object", "object_schema", "stream_object"]
