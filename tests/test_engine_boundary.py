"""The engine boundary is mechanical, in both directions.

- Nothing under ``engine/`` imports the Django side. ``engine`` must stay usable
  as a plain library (workers, benchmarks, other frameworks), so it may not
  import django, channels, daphne, asgiref or queueadmin, not even under
  ``TYPE_CHECKING`` or inside a function.
- Nothing outside ``engine/`` (``queueadmin/``, ``bench/``, ``chaos/`` and the
  tests outside ``tests/engine/``) imports an engine internal: only ``engine``
  itself and the public submodules in :data:`PUBLIC_MODULES`, so the engine can
  rearrange its insides without breaking its users.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ENGINE_DIR = ROOT / "engine"
# Code that uses the engine from outside; tests/engine/ tests the insides.
OUTSIDE_DIRS = ("queueadmin", "bench", "chaos", "tests")
INSIDE_TESTS = ROOT / "tests" / "engine"
# The engine's public API: the package and the submodules its docstring documents.
PUBLIC_MODULES = frozenset({"engine", "engine.ops", "engine.transitions", "engine.wire", "engine.stores"})
BANNED = frozenset({"django", "channels", "daphne", "asgiref", "queueadmin"})
# Calls that import a module named by a string argument.
DYNAMIC_IMPORTERS = frozenset({"import_module", "__import__"})


def module_name(path: Path, root: Path) -> str:
    """The dotted module name of ``path`` inside the package tree rooted at ``root.parent``."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def banned_imports(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """Return a description of each banned import in ``source``.

    ``module`` is the dotted name of the module the source belongs to; it
    resolves relative imports. A relative import that climbs out of the
    ``engine`` package (where ``from .. import x`` would name a top-level
    module) is banned too, whatever it names.
    """
    tree = ast.parse(source)
    package = module.split(".") if is_package else module.split(".")[:-1]
    found: list[str] = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                targets = [node.module or ""]
            else:
                keep = len(package) - (node.level - 1)
                if keep < 1:
                    found.append(f"line {node.lineno}: relative import climbs out of the package")
                    continue
                base = package[:keep]
                if node.module:
                    targets = [".".join([*base, node.module])]
                else:
                    # `from . import x` imports the module base.x
                    targets = [".".join([*base, alias.name]) for alias in node.names]
        elif isinstance(node, ast.Call) and _called_name(node.func) in DYNAMIC_IMPORTERS and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                targets = [first.value]
        for target in targets:
            if target.split(".")[0] in BANNED:
                found.append(f"line {node.lineno}: imports {target}")
    return found


def _called_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def test_engine_imports_nothing_from_the_django_side() -> None:
    files = sorted(ENGINE_DIR.rglob("*.py"))
    assert files, f"no Python files found under {ENGINE_DIR}"
    problems = []
    for path in files:
        found = banned_imports(
            path.read_text(encoding="utf-8"),
            module_name(path, ENGINE_DIR),
            is_package=path.name == "__init__.py",
        )
        problems += [f"{path.relative_to(ENGINE_DIR.parent)} {p}" for p in found]
    assert not problems, "engine/ must not import Django-side code:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "source",
    [
        "import django",
        "import django.db.models",
        "import os, channels.layers",
        "from daphne.server import Server",
        "from asgiref.sync import async_to_sync",
        "import queueadmin.settings as s",
        "def f():\n    from django.conf import settings",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from django.http import HttpRequest",
        "import importlib\nimportlib.import_module('django.conf')",
        "__import__('channels')",
        # engine/x.py: `from .. import` names top-level modules
        "from .. import django",
        "from ..queueadmin import views",
    ],
)
def test_checker_catches(source: str) -> None:
    assert banned_imports(source, "engine.x"), source


@pytest.mark.parametrize(
    ("source", "module", "is_package"),
    [
        ("import os\nfrom engine.errors import EngineError", "engine.x", False),
        ("from . import errors\nfrom .stores import open_store", "engine.x", False),
        ("from .. import errors", "engine.stores.file", False),
        ("from . import base", "engine.stores", True),
        ("import djangoish\nimport channels_like", "engine.x", False),
    ],
)
def test_checker_allows(source: str, module: str, is_package: bool) -> None:
    assert banned_imports(source, module, is_package=is_package) == []


def internal_engine_imports(source: str) -> list[str]:
    """Return a description of each import of an engine internal in ``source``.

    Allowed: ``import engine``, ``from engine import x`` and the same for the
    modules in :data:`PUBLIC_MODULES`. Banned: any other ``engine.*`` module,
    also through ``from engine import <internal module>`` and ``import_module``.
    """
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            targets = [node.module]
            if node.module in PUBLIC_MODULES:
                # `from engine import operations` names a module, not an export.
                targets += [f"{node.module}.{alias.name}" for alias in node.names if alias.name.islower()]
        elif isinstance(node, ast.Call) and _called_name(node.func) in DYNAMIC_IMPORTERS and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                targets = [first.value]
        for target in targets:
            if target.split(".")[0] == "engine" and target not in PUBLIC_MODULES and _is_module(target):
                found.append(f"line {node.lineno}: imports {target}")
    return found


def _is_module(dotted: str) -> bool:
    """Whether ``dotted`` names a module or package under engine/ (not an exported name)."""
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _outside_files() -> list[Path]:
    files = [path for folder in OUTSIDE_DIRS for path in sorted((ROOT / folder).rglob("*.py"))]
    return [path for path in files if INSIDE_TESTS not in path.parents]


def test_outside_code_imports_only_the_public_engine_api() -> None:
    files = _outside_files()
    assert len(files) > 50, f"expected the queueadmin, bench, chaos and test files, found {len(files)}"
    problems = []
    for path in files:
        problems += [f"{path.relative_to(ROOT)} {p}" for p in internal_engine_imports(path.read_text(encoding="utf-8"))]
    assert not problems, "import these from `engine` or a public submodule:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "source",
    [
        "from engine.document import QueueState",
        "import engine.committer",
        "from engine.stores.file import FileStore",
        "from engine import committer",
        "def f():\n    from engine.worker import Worker",
        "import importlib\nimportlib.import_module('engine.http_client')",
    ],
)
def test_public_checker_catches(source: str) -> None:
    assert internal_engine_imports(source), source


@pytest.mark.parametrize(
    "source",
    [
        "import engine",
        "from engine import Broker, QueueState, open_store",
        "from engine.ops import push_op",
        "from engine.stores import MemoryStore",
        "from engine.transitions import apply",
        "from engine import wire",
        "import enginex.document",
    ],
)
def test_public_checker_allows(source: str) -> None:
    assert internal_engine_imports(source) == []


@pytest.mark.parametrize("name", sorted(PUBLIC_MODULES))
def test_public_modules_export_what_they_declare(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported, f"{name} declares no __all__"
    missing = [attr for attr in exported if not hasattr(module, attr)]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"
