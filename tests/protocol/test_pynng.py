"""pynng's private parts that protocol/nng.py uses exist in the pynng installed, and that
pynng is one pyproject.toml allows (the bound names the releases they were checked in)."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import tomllib

from packaging.requirements import Requirement
from pynng import _aio

from helpers import REPO

NNG_PY = REPO / "protocol" / "nng.py"


def private_names() -> set[tuple[str, str]]:
    """(module, name) of every private pynng name nng.py reaches: `lib.X` and `ffi.X`
    (from pynng._nng), `_aio.X`, and `pynng.sockaddr._X`."""
    tree = ast.parse(NNG_PY.read_text())
    found: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id in ("lib", "ffi"):
            found.add((f"pynng._nng.{value.id}", node.attr))
        elif isinstance(value, ast.Name) and value.id == "_aio":
            found.add(("pynng._aio", node.attr))
        elif isinstance(value, ast.Attribute) and ast.unparse(value) == "pynng.sockaddr":
            found.add(("pynng.sockaddr", node.attr))
    return found


def resolve(path: str) -> object:
    module, _, attr = path.rpartition(".")
    if attr in ("lib", "ffi"):
        return getattr(importlib.import_module(module), attr)
    return importlib.import_module(path)


def test_every_private_pynng_name_nng_py_uses_exists():
    names = private_names()
    # The parts the module's docstring names, found by the scan (so it scans what it should).
    assert {("pynng._aio", "AIOHelper"), ("pynng._nng.lib", "nng_recv"), ("pynng.sockaddr", "_nng_sockaddr")} <= names
    assert callable(getattr(_aio.AIOHelper, "asend", None))  # `_asend` sends through it
    missing = sorted(f"{where}.{name}" for where, name in names if not hasattr(resolve(where), name))
    assert not missing, f"pynng {importlib.metadata.version('pynng')} lacks {missing}"


def test_the_installed_pynng_is_one_pyproject_allows():
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    pynng = next(Requirement(d) for d in dependencies if Requirement(d).name == "pynng")
    assert pynng.specifier, "pynng needs an upper bound: nng.py uses its private modules"
    assert any(s.operator in ("<", "<=", "==", "~=") for s in pynng.specifier), pynng
    assert pynng.specifier.contains(importlib.metadata.version("pynng")), pynng
