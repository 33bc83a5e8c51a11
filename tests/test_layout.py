"""The architecture's boundaries, checked: one namespace, and imports that follow the process lines."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from helpers import REPO

FOLDERS = {
    "protocol": "protocol",
    "config": "config",
    "supervisor": "supervisor",
    "workers": "workers",
    "client": "clients/python/trunkline",
}


def imports_of(folder: str) -> dict[Path, set[str]]:
    """Absolute `trunkline.*` targets of every import in a folder (relative imports resolved)."""
    root = REPO / folder
    package = "trunkline" if folder.startswith("clients") else f"trunkline.{folder}"
    out: dict[Path, set[str]] = {}
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).with_suffix("")
        parts = [*package.split("."), *rel.parts]
        if parts[-1] == "__init__":
            parts.pop()
        here = parts if path.name == "__init__.py" else parts[:-1]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here[: len(here) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                found.add(target)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
        out[path] = {t for t in found if t.startswith("trunkline")}
    return out


def test_protocol_imports_nothing_of_the_project():
    for path, targets in imports_of("protocol").items():
        assert all(t.startswith("trunkline.protocol") for t in targets), (path, targets)


def test_supervisor_and_clients_never_import_workers():
    for folder in ("supervisor", "clients/python/trunkline", "config"):
        for path, targets in imports_of(folder).items():
            assert not any(t.startswith("trunkline.workers") for t in targets), (path, targets)


def test_client_loads_the_daemon_only_for_serve():
    for path, targets in imports_of("clients/python/trunkline").items():
        if any(t.startswith("trunkline.supervisor") for t in targets):
            assert path.name == "cli.py"
            assert "from .supervisor.daemon import main_serve" in path.read_text()


def test_every_package_is_declared_under_the_trunkline_namespace():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    declared = set(project["packages"])
    mapping = project["package-dir"]
    found = set()
    for name, folder in mapping.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder)
            found.add(".".join([name, *rel.parts]))
    assert found == declared, f"undeclared: {found - declared}, stale: {declared - found}"
    assert all(p == "trunkline" or p.startswith("trunkline.") for p in declared)


def test_every_provider_folder_has_the_same_parts():
    for folder in (REPO / "workers").iterdir():
        if folder.is_dir() and (folder / "__init__.py").exists():
            parts = {p.stem for p in folder.glob("*.py")}
            assert {"request", "response", "stream", "errors", "capabilities", "adapter"} <= parts, folder.name
