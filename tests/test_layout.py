"""The package's shape: one import name, and layers that only point down.

core types -> data and storage -> model calls | scoring -> judges -> judging -> views (what a person
reads) | tasks -> flows -> deployments | runtime (the run path both doors share) -> the two doors: the CLI and
the Python entry point (api), neither importing the other. A module may import its own
layer and the layers below it, never one above nor a sibling on its rung: that is what lets a judge be
tested without Prefect and a model client without judges. The stand-ins (`testing/`) sit outside: nothing
in the package imports them.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "judgebench_flows"
FOLDERS = ("judges", "tasks", "flows", "deployments", "templates")  # the design's top-level folders

# The layers, lowest first; packages on one rung do not import each other.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",),
    ("data",),
    ("calls", "scoring"),
    ("judges",),
    ("judging",),
    ("views", "tasks"),
    ("flows",),
    # deployments: schedules and automations; runtime: the run path under the command and evaluate() (the
    # Prefect server, its watch, a quiet Prefect), so the library never imports the command line
    ("deployments", "runtime"),
    # the two doors, side by side: the command line and the Python entry point (`judgebench_flows.evaluate`,
    # what `judgebench run` does, as a function); what both need lives below them (runtime)
    ("cli", "api"),
)
RUNG = {package: rung for rung, packages in enumerate(LAYERS) for package in packages}
BELOW: dict[str, set[str]] = {
    package: {other for other, other_rung in RUNG.items() if other_rung < rung} for package, rung in RUNG.items()
}


def source_files() -> dict[str, Path]:
    """Module name -> file, for every module installed under the one import name."""
    modules: dict[str, Path] = {}
    for path in (ROOT / PACKAGE).rglob("*.py"):
        modules[".".join((PACKAGE, *path.relative_to(ROOT / PACKAGE).with_suffix("").parts))] = path
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            modules[".".join((PACKAGE, *path.relative_to(ROOT).with_suffix("").parts))] = path
    return {name.removesuffix(".__init__"): path for name, path in modules.items()}


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == PACKAGE and parts[1] in BELOW else None


def imported_modules(path: Path, module: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import: resolve against this module's package
                base = (
                    module.split(".")[: -node.level]
                    if not path.name == "__init__.py"
                    else module.split(".")[: len(module.split(".")) - node.level + 1]
                )
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return found


def test_every_module_sits_in_a_known_layer() -> None:
    strays = [
        name
        for name in source_files()
        if name != PACKAGE and layer_of(name) is None and name.split(".")[1] not in ("testing", "templates")
    ]
    assert not strays, f"modules outside every layer (add them to a layer package): {strays}"


def test_no_import_points_to_a_higher_layer() -> None:
    violations = []
    for module, path in sorted(source_files().items()):
        layer = layer_of(module)
        if layer is None:
            continue
        for target in imported_modules(path, module):
            if target.split(".")[0] in FOLDERS:
                violations.append(f"{module} imports {target} by its folder name, not as {PACKAGE}.{target}")
                continue
            other = layer_of(target)
            if other and other != layer and other not in BELOW[layer]:
                violations.append(f"{module} ({layer}) imports {target} ({other})")
    assert not violations, "\n".join(violations)


def module_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports. `from package import module` is an import of that
    module (the package's __init__ has run by then, whatever it imports)."""
    files = source_files()
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        found = imported_modules(path, module)
        named = {name.rsplit(".", 1)[0] for name in found if name in files and name.rsplit(".", 1)[0] in found}
        graph[module] = {name for name in found if name in files and name != module} - named
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each a cycle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle() -> None:
    """Imports inside functions count too: a cycle hidden in a function is still two modules that need
    each other, and the first to change breaks the other."""
    assert not cycles(module_graph()), cycles(module_graph())


def package_graph() -> dict[str, set[str]]:
    """Layer package -> the other layer packages its modules import (`testing` too, to catch its use)."""
    graph: dict[str, set[str]] = {package: set() for package in RUNG}
    for module, imports in module_graph().items():
        layer = layer_of(module)
        if layer is not None:
            graph[layer] |= {target.split(".")[1] for target in imports if target.count(".")} - {layer}
    return graph


def test_the_layers_import_in_one_direction_only() -> None:
    """The packages' own import graph, not just the table: no cycle between packages, flows never
    importing deployments (the matrix both read sits in judging), nothing importing the stand-ins, and
    every package placed on its rung of LAYERS by what it imports."""
    graph = package_graph()
    assert not cycles(graph), cycles(graph)
    assert "deployments" not in graph["flows"], "flows/ imports deployments/: move what both need below both"
    assert not [package for package, imports in graph.items() if "testing" in imports]
    for package, imports in graph.items():
        assert imports <= BELOW[package], f"{package} imports {sorted(imports - BELOW[package])} from above"
    assert graph["flows"] >= {"judging", "tasks"} and graph["deployments"] >= {"flows"}  # the test bites
    assert "cli" not in graph["api"], "api/ imports cli/: move what both need into runtime/"


def test_a_layer_pointing_up_is_caught() -> None:
    """The checks above on a graph with flows -> deployments -> flows."""
    graph = {"flows": {"deployments", "judging"}, "deployments": {"flows"}, "judging": set()}
    assert cycles(graph) == [["deployments", "flows"]]
    assert not {"deployments"} <= BELOW["flows"] and {"flows"} <= BELOW["deployments"]


def test_cycles_are_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


MAX_FUNCTION_LINES = 80


def test_no_function_over_80_lines() -> None:
    long = []
    for module, path in sorted(source_files().items()):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{module}.{node.name}: {lines} lines")
    assert not long, "split these functions:\n" + "\n".join(long)


def test_one_import_name_and_every_package_installed() -> None:
    """pyproject's package list is the tree's: a new subpackage that is not listed would not be installed."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    assert {name.split(".")[0] for name in listed} == {PACKAGE}
    on_disk = {name for name, path in source_files().items() if path.name == "__init__.py"}
    on_disk.add(f"{PACKAGE}.templates")
    assert on_disk == listed, (
        f"pyproject packages differ from the tree: missing {on_disk - listed}, stale {listed - on_disk}"
    )
    assert config["package-dir"] == {f"{PACKAGE}.{folder}": folder for folder in FOLDERS}
    for folder in FOLDERS:
        assert (ROOT / folder).is_dir(), f"the design's top-level folder {folder}/ is gone"


@pytest.mark.slow
def test_built_wheel_adds_only_one_top_level_name(tmp_path: Path) -> None:
    """What `pip install` puts into site-packages: build the wheel and list its top-level names."""
    import subprocess
    import zipfile

    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {PACKAGE}, f"site-packages would gain other top-level names: {sorted(top)}"
    for expected in (
        "judgebench_flows/flows/nightly.py",
        "judgebench_flows/judges/builtin.py",
        "judgebench_flows/templates/report.html.jinja2",
        "judgebench_flows/deployments/nightly.yaml",
        "judgebench_flows/core/prices.yaml",
    ):
        assert expected in names


@pytest.mark.parametrize("folder", ["judges", "tasks", "flows", "deployments", "templates"])
def test_design_folders_import_under_the_package_name(folder: str) -> None:
    import importlib

    module = importlib.import_module(f"{PACKAGE}.{folder}")
    assert Path(module.__file__ or next(iter(module.__path__))).resolve().is_relative_to(ROOT / folder)
