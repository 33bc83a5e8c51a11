"""Catalog entries as files write them: the protocol's `ModelInfo`, read strictly.

One schema describes a model, on the wire and in `models.yaml` or a user file's
`models:`: `ModelInfo` with its `Price` and `ModelRules`. An entry is keyed by its
id (`provider:name`), which gives `id` and `provider`; the catalog sets the rest
of what an entry never says (`SET_BY_THE_CATALOG`).

On the wire unknown fields are skipped, so that an older peer keeps working; in a
file a misspelt key is a silent bug. So every key of an entry is checked against
the fields it may set (`unknown_key`) before it becomes a `ModelInfo`, and is
refused in msgspec's own words, as a config type's would be.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import msgspec
import msgspec.inspect as mi

from ..protocol.messages import ModelInfo

#: ModelInfo's fields an entry does not set: its key is its id (and names its provider),
#: the catalog's own file gives the pricing version, the configuration the rest.
SET_BY_THE_CATALOG: dict[type, tuple[str, ...]] = {
    ModelInfo: ("id", "provider", "pricing_version", "configured", "in_catalog", "capabilities"),
}


def unknown_key(
    value: Any, kind: Any, not_keys: Mapping[type, Collection[str]] = SET_BY_THE_CATALOG
) -> msgspec.ValidationError | None:
    """The error for the first key of `value` (plain data, as YAML gives it) that no
    field of the type `kind` takes, at any depth, in msgspec's words and path
    (`$.models[...].price`); None when every key is a field. The names `not_keys`
    lists for a Struct type are not keys there, though they are fields."""
    found = _first_unknown(value, mi.type_info(kind), "$", not_keys)
    if found is None:
        return None
    path, key = found
    where = f" - at `{path}`" if path != "$" else ""
    return msgspec.ValidationError(f"Object contains unknown field `{key}`{where}")


def _first_unknown(
    value: Any, kind: mi.Type, path: str, not_keys: Mapping[type, Collection[str]]
) -> tuple[str, str] | None:
    # Only what can hold a key is followed; every other mismatch is msgspec.convert's to report.
    match kind:
        case mi.StructType(cls=cls, fields=fields) if isinstance(value, dict):
            by_name = {f.encode_name: f for f in fields}
            hidden = not_keys.get(cls, ())
            for key, item in value.items():
                field = by_name.get(key)
                if field is None or key in hidden:
                    return path, str(key)
                found = _first_unknown(item, field.type, f"{path}.{key}", not_keys)
                if found is not None:
                    return found
        case mi.DictType(value_type=item_kind) if isinstance(value, dict):
            for item in value.values():
                found = _first_unknown(item, item_kind, f"{path}[...]", not_keys)
                if found is not None:
                    return found
        case mi.ListType(item_type=item_kind) if isinstance(value, list):
            for i, item in enumerate(value):
                found = _first_unknown(item, item_kind, f"{path}[{i}]", not_keys)
                if found is not None:
                    return found
        case mi.UnionType(types=options):
            for option in options:
                found = _first_unknown(value, option, path, not_keys)
                if found is not None:
                    return found
    return None


def entry_fields(model_id: str, fields: Any) -> Any:
    """An entry's fields as `ModelInfo` takes them: with the id and provider its key gives."""
    if not isinstance(fields, dict):
        return fields  # msgspec.convert says what it expected
    return {**fields, "id": model_id, "provider": model_id.partition(":")[0]}


def model_entry(model_id: str, fields: Any) -> ModelInfo:
    """The catalog entry for `model_id` from a file's `fields`; raises
    `msgspec.ValidationError` (a path relative to the entry) for a key that is not a
    field, a missing field or a value of the wrong type."""
    problem = unknown_key(fields, ModelInfo)
    if problem is not None:
        raise problem
    return msgspec.convert(entry_fields(model_id, fields), ModelInfo)
