"""The package's shape: a curated public API, a light ``import equiv``, imports that point down
the pipeline (config -> models -> engines -> verdicts -> run -> report -> cli/pytest)."""

from __future__ import annotations

import ast
import graphlib
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import equiv

PACKAGE = Path(equiv.__file__).parent
# The pipeline's stages, lowest first: a module may import its own stage and those below.
STAGES = {
    "errors": 0,
    "json_types": 0,
    "config": 1,
    "prompts": 1,
    "records": 1,
    "options": 2,
    "models": 2,
    "engines": 3,
    "verdicts": 4,
    "run": 5,
    "report": 6,
    "cli": 7,
    "pytest": 7,
}


def _stage(module: str) -> str:
    return module.split(".")[1]


def _imports() -> list[tuple[str, str]]:
    found = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        module = ".".join(rel.parts).removesuffix(".__init__")
        if module.count(".") == 0 or module == "equiv.__main__":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("equiv."):
                found.append((module, str(node.module)))
            elif isinstance(node, ast.Import):
                found += [(module, a.name) for a in node.names if a.name.startswith("equiv.")]
    return found


def test_every_import_points_down_the_pipeline():
    imports = _imports()
    assert len(imports) > 100  # the walk found the package's imports
    upward = [
        f"{source} imports {target}"
        for source, target in imports
        if STAGES[_stage(target)] > STAGES[_stage(source)]
    ]
    assert upward == []


def _modules() -> dict[str, Path]:
    return {
        ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(
            ".__init__"
        ): path
        for path in PACKAGE.rglob("*.py")
    }


def _type_checking_only(tree: ast.AST) -> set[int]:
    """The nodes under ``if TYPE_CHECKING:``: imports for annotations, never executed."""
    nodes: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            nodes.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return nodes


def _import_graph() -> dict[str, set[str]]:
    """Module -> the equiv modules it imports when it runs (at the top or inside a function;
    ``from equiv.cli import diagnose`` imports the module ``equiv.cli.diagnose``)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_only(tree)
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
        graph[module] = {t for t in targets if t in modules and t != module}
    return graph


def test_no_import_cycle_in_the_package():
    graph = _import_graph()
    assert sum(map(len, graph.values())) > 100  # the walk found the package's imports
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")
    assert set(order) == set(graph)


def test_the_cycle_check_sees_a_cycle():
    with pytest.raises(graphlib.CycleError):
        list(graphlib.TopologicalSorter({"a": {"b"}, "b": {"a"}}).static_order())


MAX_LINES = 400  # a module past it holds more than one responsibility: split it by them
MAX_FUNCTION_LINES = 60  # from ``def`` to its last line, docstring included


def test_no_module_is_past_400_lines():
    long = {
        str(path.relative_to(PACKAGE.parent))
        for path in _modules().values()
        if len(path.read_text(encoding="utf-8").splitlines()) > MAX_LINES
    }
    assert long == set()


def test_no_function_is_past_60_lines():
    long = []
    for module, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{module}.{node.name}: {lines} lines")
    assert long == []


def test_every_package_is_listed_for_setuptools():
    """A subpackage missing from ``[tool.setuptools] packages`` is left out of the wheel."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib

    pyproject = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(pyproject["tool"]["setuptools"]["packages"])
    packages = {m for m, path in _modules().items() if path.name == "__init__.py"}
    assert packages <= listed


def test_the_engine_contract_imports_no_engine():
    contract = [t for s, t in _imports() if s == "equiv.engines.base"]
    assert contract
    assert not [t for t in contract if t.startswith("equiv.engines.")]


@pytest.mark.parametrize("name", equiv.__all__)
def test_every_public_name_resolves_to_what_its_module_defines(name):
    """The lazy ``__getattr__`` gives the object its home module holds under that name (not a
    stale copy, not None): classes and functions by ``__module__``, constants by the table."""
    obj = getattr(equiv, name)
    home = equiv._LAZY.get(name)  # type: ignore[attr-defined]
    if home is None:  # defined by equiv/__init__.py itself
        assert name in vars(equiv)
        return
    assert getattr(importlib.import_module(home), name) is obj
    if isinstance(obj, type) or inspect.isfunction(obj):
        assert obj.__module__.startswith("equiv."), (name, obj.__module__)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Runner'"):
        _ = equiv.Runner  # type: ignore[attr-defined]


def test_import_equiv_loads_no_heavy_dependency():
    code = (
        "import sys, equiv; "
        "print(sorted(m for m in ('numpy', 'scipy', 'jinja2', 'rich', 'llama_cpp') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "module",
    ["equiv.cli.diagnose.run", "equiv.pytest.plugin", "equiv.run.execute", "equiv.engines"],
)
def test_each_entry_module_imports_on_its_own(module):
    """No import cycle: each module imports first in a fresh interpreter."""
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True)


def test_every_fingerprint_key_the_classifier_explains_is_in_the_contract():
    from equiv.engines.base import FINGERPRINT_KEYS
    from equiv.verdicts.temp0.classify import _WHY

    assert set(_WHY) <= set(FINGERPRINT_KEYS["compared"])
