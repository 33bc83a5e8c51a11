"""A tool call's arguments checked against its tool's JSON Schema, in one sentence.

Shared by the worker (which puts the sentence in a warning on the response, so every
client hears of it, the C client and the HTTP front door included) and the Python
client's tool loop (which answers the call with it as an error result). Both say the
same thing because both use this.
"""

from __future__ import annotations

from typing import Any

#: Schemas already compiled, by their JSON text: an agent sends the same tools on every
#: step, and a validator costs more to build than to run.
_VALIDATORS: dict[str, Any] = {}
_MAX_CACHED = 256


def _validator(schema: dict[str, Any]) -> Any:
    # jsonschema is imported on first use (about 100 ms): a process that never sees a
    # tool call never pays for it.
    import json

    import jsonschema

    key = json.dumps(schema, sort_keys=True, default=str)
    found = _VALIDATORS.get(key)
    if found is None:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        found = cls(schema, format_checker=cls.FORMAT_CHECKER)
        if len(_VALIDATORS) >= _MAX_CACHED:
            _VALIDATORS.pop(next(iter(_VALIDATORS)))
        _VALIDATORS[key] = found
    return found


def argument_errors(schema: dict[str, Any], arguments: Any) -> str | None:
    """Why `arguments` do not fit `schema` (one clause per problem, each at its path), or
    None when they fit. A schema the validator cannot use (an unknown type, a `$ref`
    that leads nowhere) judges nothing: None, as the provider took the schema as it was."""
    try:
        errors = sorted(_validator(schema).iter_errors(arguments), key=lambda e: list(e.absolute_path))
    except Exception:  # noqa: BLE001 - jsonschema raises several unrelated types for a schema it cannot use
        return None
    if not errors:
        return None
    return "; ".join(f"{'/'.join(str(p) for p in e.absolute_path) or '(arguments)'}: {e.message}" for e in errors)


__all__ = ["argument_errors"]
