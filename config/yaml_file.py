"""Reading the YAML files trunkline has (the config and the model catalog).

Imported by the functions that read one, not at the top of the modules that hold
them: a worker imports the config's types and the catalog's prices but reads no
file, so neither it nor the fork server loads PyYAML (15 ms of a fork server's
start, and its pages in every worker).
"""

from __future__ import annotations

from typing import Any

import yaml

#: libyaml's parser when PyYAML was built with it (its wheels are): the catalog took
#: 0.27 s to read with the pure-Python one, 0.03 s with this, on every start, reload and
#: autostarting client.
SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

YAMLError = yaml.YAMLError


class UniqueKeys(SAFE_LOADER):  # type: ignore[misc,valid-type]  # libyaml's loader where there is one: a variable base
    """YAML's last-wins for a repeated key hides a mistake (two `providers:` blocks, a
    key given twice): refuse it, with its line. On libyaml's parser, as the catalog's
    loader: the pure-Python one took 14.5 ms to read the defaults and a config, which
    `serve` reads twice before its fork server can start."""


def _unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def load_unique(text: str) -> Any:
    """The document in `text`, refusing a key repeated in a mapping."""
    return yaml.load(text, Loader=UniqueKeys)


def load_fast(text: str) -> Any:
    return yaml.load(text, Loader=SAFE_LOADER)
