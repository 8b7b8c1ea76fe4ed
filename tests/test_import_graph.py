"""The import graph of grpo/ flows one way, between modules and between packages: no module takes
part in a cycle, no package-level knot (each subpackage and each top-level module of grpo/ is one
unit; no two units reach each other), and the schema (grpo/config.py) imports no other grpo module.

Every import counts, including those inside functions, under TYPE_CHECKING and under a main
guard: a lazy import still ties two modules together."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "grpo"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """grpo module -> the grpo modules it imports (a `from pkg import name` counts as an import of
    the submodule pkg.name when there is one, else of pkg)."""
    modules = {module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative import
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            else:
                continue
            edges.update(t for t in targets if t in modules and t != name)
        graph[name] = edges
    return graph


def unit_of(module: str) -> str:
    """The unit of a module: its subpackage of grpo (grpo.train for grpo.train.trainer), or the
    top-level module itself (grpo.stages)."""
    return ".".join(module.split(".")[:2])


def unit_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded into units: unit -> the other units its modules import."""
    units: dict[str, set[str]] = {}
    for module, imports in graph.items():
        unit = unit_of(module)
        units.setdefault(unit, set()).update(unit_of(m) for m in imports if unit_of(m) != unit)
    return units


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_of_grpo_takes_part_in_an_import_cycle():
    assert cycles(import_graph()) == []


def test_no_package_level_knot():
    """No two units (subpackages, top-level modules) of grpo/ reach each other."""
    assert cycles(unit_graph(import_graph())) == []


def test_at_most_eight_modules_at_the_top_of_grpo():
    """Everything else lives in a package named for its role."""
    top = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert len(top) <= 8, top


def test_the_schema_imports_no_other_grpo_module():
    assert import_graph()["grpo.config"] == set()


def test_the_checker_finds_a_cycle_and_a_schema_import(tmp_path):
    """The two checks above on a small package that breaks both rules."""
    pkg = tmp_path / "grpo"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "config.py").write_text("def f():\n    from grpo.sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from . import b\n")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import grpo.sub.a\n"
    )
    graph = import_graph(pkg)
    assert cycles(graph) == [["grpo.sub.a", "grpo.sub.b"]]
    assert graph["grpo.config"] == {"grpo.sub.b"}


def test_the_checker_finds_a_planted_package_knot(tmp_path):
    """Three units that are clean module by module but knotted as packages: a lazy import and a
    TYPE_CHECKING one close the knot."""
    pkg = tmp_path / "grpo"
    for sub in ("front", "train", "envs"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "front" / "cli.py").write_text("from grpo.train.loop import run\n")
    (pkg / "train" / "loop.py").write_text("def run():\n    from grpo.envs.base import Env\n")
    (pkg / "envs" / "base.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from grpo.front.compose import f\n"
    )
    (pkg / "front" / "compose.py").write_text("def f():\n    pass\n")
    (pkg / "stages.py").write_text("from grpo.front import cli\n")
    graph = import_graph(pkg)
    assert cycles(graph) == []  # no module-level cycle
    assert cycles(unit_graph(graph)) == [["grpo.envs", "grpo.front", "grpo.train"]]
    assert unit_graph(graph)["grpo.stages"] == {"grpo.front"}
