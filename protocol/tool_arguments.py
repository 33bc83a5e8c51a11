"""A tool call's arguments checked against its tool's JSON Schema, in one sentence.

Shared by the worker (which puts the sentence in a warning on the response, so every
client hears of it, the C client and the HTTP front door included) and the Python
client's tool loop (which answers the call with it as an error result). Both say the
same thing because both use this.

The worker checks with `guarded=True`: a worker serves every client of its provider on
one event loop, and a schema is the caller's to write, so the check must not be a way
to stall it. A guarded check runs no regular expression of the schema's (`pattern` is
not checked, a schema with `patternProperties` is not judged: Python's `re` can
backtrack for minutes on a short string) and gives up, judging nothing, past
`BUDGET` keyword evaluations (nested `anyOf`s behind a `$ref` grow exponentially with
the depth of the arguments). The client checks its own tools unguarded: it is the
caller's own process.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

#: Keyword evaluations a guarded check may make: a tool's usual arguments take tens (an
#: array of 380 objects of five strings, 5,000), and this many take 40-100 ms.
BUDGET = 5_000

#: Schemas already compiled, by their JSON text: an agent sends the same tools on every
#: step, and a validator costs more to build than to run.
_VALIDATORS: dict[tuple[bool, str], Any] = {}
_MAX_CACHED = 256
_GUARDED_CLASSES: dict[Any, Any] = {}
_spent = threading.local()


class _OverBudget(Exception):
    pass


def _spend(units: int = 1) -> None:
    left = getattr(_spent, "left", None)
    if left is None:
        return  # an unguarded check
    left -= units
    if left < 0:
        raise _OverBudget
    _spent.left = left


def _counted(check: Callable[..., Any]) -> Callable[..., Any]:
    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        _spend()
        return check(validator, value, instance, schema)

    return counted


def _unique_items(check: Callable[..., Any]) -> Callable[..., Any]:
    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        # Unhashable items are compared pairwise.
        _spend(1 + (len(instance) ** 2 // 1000 if isinstance(instance, list) else 0))
        return check(validator, value, instance, schema)

    return counted


def _no_pattern(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
    return iter(())


def _guarded_class(cls: Any) -> Any:
    found = _GUARDED_CLASSES.get(cls)
    if found is None:
        import jsonschema

        keywords: dict[str, Any] = {name: _counted(check) for name, check in cls.VALIDATORS.items()}
        keywords["pattern"] = _no_pattern
        if "uniqueItems" in cls.VALIDATORS:
            keywords["uniqueItems"] = _unique_items(cls.VALIDATORS["uniqueItems"])
        extend = jsonschema.validators.extend  # types-jsonschema leaves it untyped
        found = _GUARDED_CLASSES[cls] = extend(cls, validators=keywords)  # type: ignore[no-untyped-call]  # see above
    return found


def _has_key(value: Any, key: str) -> bool:
    if isinstance(value, dict):
        return key in value or any(_has_key(v, key) for v in value.values())
    if isinstance(value, list):
        return any(_has_key(v, key) for v in value)
    return False


def _validator(schema: dict[str, Any], guarded: bool) -> Any:
    """A compiled validator for `schema`, or None when a guarded check will not judge it."""
    # jsonschema is imported on first use (40-120 ms): a process that never sees a tool
    # call never pays for it.
    import jsonschema

    key = (guarded, json.dumps(schema, sort_keys=True, default=str))
    if key in _VALIDATORS:
        return _VALIDATORS[key]
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    found: Any = None
    if not (guarded and _has_key(schema, "patternProperties")):
        if guarded:
            cls = _guarded_class(cls)
        found = cls(schema, format_checker=cls.FORMAT_CHECKER)
    if len(_VALIDATORS) >= _MAX_CACHED:
        _VALIDATORS.pop(next(iter(_VALIDATORS)))
    _VALIDATORS[key] = found
    return found


def argument_errors(schema: dict[str, Any], arguments: Any, *, guarded: bool = False) -> str | None:
    """Why `arguments` do not fit `schema` (one clause per problem, each at its path), or
    None when they fit. A schema the validator cannot use (an unknown type, a `$ref`
    that leads nowhere, one that recurses without end) judges nothing: None, as the
    provider took the schema as it was; so does a guarded check it will not make or
    that ran out of budget (see the module's docstring)."""
    try:
        validator = _validator(schema, guarded)
        if validator is None:
            return None
        _spent.left = BUDGET if guarded else None
        try:
            errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        finally:
            _spent.left = None
    except Exception:  # noqa: BLE001 - jsonschema raises many unrelated types for a schema it cannot use
        return None
    if not errors:
        return None
    return "; ".join(f"{'/'.join(str(p) for p in e.absolute_path) or '(arguments)'}: {e.message}" for e in errors)


__all__ = ["BUDGET", "argument_errors"]
