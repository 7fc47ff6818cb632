"""Every third-party package the product code imports is declared in pyproject.toml and pinned in
constraints.txt: an undeclared import works on the machine that happens to have it installed (another
package pulled it in) and breaks on the next install that resolves differently."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys

import tomllib

from tests.test_layout import ROOT, source_files

# Import names whose distribution is named otherwise, for the optional packages that may not be installed
# (an installed package's distribution is read from its metadata).
KNOWN_DISTRIBUTIONS = {
    "torch": "torch",
    "transformers": "transformers",
    "yaml": "PyYAML",
    "jinja2": "Jinja2",
    "azure": "azure-identity",  # the `azure` extra: `azure.identity` for Microsoft Entra ID
}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_top_names() -> dict[str, set[str]]:
    """Top-level name -> the product modules importing it (inside functions too), stdlib and our own aside."""
    found: dict[str, set[str]] = {}
    for module, path in source_files().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "judgebench_flows":
                    found.setdefault(top, set()).add(module)
    return found


def distribution_of(top: str) -> str:
    """The distribution of an import name; for a namespace several install into (`google`, `azure`: the
    storage extras' SDKs beside google-auth and azure-identity), the one pyproject.toml declares."""
    installed = [normalized(name) for name in importlib.metadata.packages_distributions().get(top) or []]
    ours = [name for name in installed if name in declared()]
    return (ours or installed or [normalized(KNOWN_DISTRIBUTIONS.get(top, top))])[0]


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [
        *project["dependencies"],
        *(r for extra in project["optional-dependencies"].values() for r in extra),
    ]
    return {normalized(re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0]) for r in requirements}


def pinned() -> set[str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return {normalized(line.split("==")[0]) for line in lines if "==" in line and not line.startswith("#")}


def undeclared(imports: dict[str, set[str]], declared_names: set[str]) -> list[str]:
    """`name (distribution): first importing module` for each import whose distribution is not declared."""
    return sorted(
        f"{top} ({distribution_of(top)}): {sorted(modules)[0]}"
        for top, modules in imports.items()
        if distribution_of(top) not in declared_names
    )


def test_every_imported_package_is_declared_and_pinned() -> None:
    imports = imported_top_names()
    assert {"openai", "prefect", "sqlalchemy", "numpy", "distributed"} <= imports.keys()  # the scan sees them
    missing = undeclared(imports, declared())
    assert not missing, "imported but not declared in pyproject.toml:\n" + "\n".join(missing)
    unpinned = sorted({distribution_of(top) for top in imports} - pinned())
    assert not unpinned, f"declared but not pinned in constraints.txt: {unpinned}"


def test_an_undeclared_import_is_found() -> None:
    """The check names a package imported but not declared, by its distribution (`yaml` is PyYAML's)."""
    imports = {"numpy": {"judgebench_flows.scoring.stats"}, "yaml": {"judgebench_flows.core.pricing"}}
    assert undeclared(imports, declared() - {"numpy", "pyyaml"}) == [
        "numpy (numpy): judgebench_flows.scoring.stats",
        "yaml (pyyaml): judgebench_flows.core.pricing",
    ]
    assert undeclared(imports, declared()) == []
