"""A test that reads the JudgeBench data goes through the guard (tests/_benchmark_data.py, conftest.py).

Without the guard a fresh clone with no ../shared/judgebench beside it fails its own tests instead of
skipping them with the one line that says how to supply the data (issue 51: tests/test_full_disk.py read
the GPT-4o file unguarded, 3 failures, unseen in CI where the data is always there). So this reads every
test module (a static scan, nothing run) and fails naming each test or fixture that reaches the data
without a guard.

Reaching the data: a name of the data's location (`SHARED`, `BESIDE_REPO`, `find_benchmark_data`), a
module-level name built from one (`GPT4O_PATH = SHARED / ...`), a literal path to it (`../shared`,
`shared/judgebench`), or a call of a helper that reaches it, in this module or a `tests._*` one, followed
call by call. A helper's parameter whose default reaches the data (`run_argv(data_path=GPT4O_PATH)`) counts
only when the call leaves it out, and a use under `if <parameter>:` (`make_repo(copy_shared=True)`) only
when the call does not pass a false constant for it.

The guard: `@requires_shared` (on the test, its class or the module's `pytestmark`), a use of
`shared_data_available` or `NO_DATA_REASON` in the test (its skip says how to supply the data), or a
fixture it requests that is guarded (`judgebench_repo`, `gpt4o_pairs`, ...).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
# The guard itself, and the tests of where it looks.
EXEMPT = {"_benchmark_data.py", "test_benchmark_data.py", "test_data_guard.py"}
ROOTS = {"SHARED", "BESIDE_REPO", "find_benchmark_data"}
DATA_PATH = re.compile(r"(^|[/\\])\.\.[/\\]shared\b|shared[/\\]judgebench|judgebench[/\\]data\b")
GUARDS = {"requires_shared", "shared_data_available", "NO_DATA_REASON"}


@dataclass
class Function:
    """What one function or fixture does with the data (before the calls it makes are followed)."""

    module: str
    node: ast.FunctionDef | ast.AsyncFunctionDef
    owner: ast.ClassDef | None = None
    direct: bool = False  # names the data itself
    calls: list[ast.Call] = field(default_factory=list)
    referenced: set[str] = field(default_factory=set)  # functions named without a call (callbacks)
    # parameter -> its position: a default that reaches the data, or a use under `if <parameter>:`
    default_reads: dict[str, int] = field(default_factory=dict)
    conditional_reads: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.node.name

    def is_fixture(self) -> bool:
        return any(_dotted(d).endswith("fixture") for d in self.node.decorator_list)

    def is_test(self) -> bool:
        return self.name.startswith("test") and (self.owner is None or self.owner.name.startswith("Test"))


def _dotted(node: ast.AST) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return f"{_dotted(target.value)}.{target.attr}"
    return ""


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of docstring constants, which name paths without reading them."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


class Module:
    """One tests/*.py file: its functions, the names it imports from other test modules, and which of its
    module-level names are built from the data's location."""

    def __init__(self, path: Path):
        self.name = path.stem
        self.tree = ast.parse(path.read_text(), filename=str(path))
        self.docstrings = _docstrings(self.tree)
        self.imports: dict[str, tuple[str, str]] = {}  # local name -> (test module, its name)
        self.functions: dict[str, Function] = {}
        self.methods: list[Function] = []
        self.tainted = set(ROOTS)
        self.assignments: list[tuple[set[str], ast.expr]] = []  # module-level names and their values
        self.marked = False  # pytestmark = requires_shared
        for node in self.tree.body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests."):
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = (node.module.removeprefix("tests."), alias.name)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                self.functions[node.name] = Function(self.name, node)
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        self.methods.append(Function(self.name, item, node))
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = {t.id for t in targets if isinstance(t, ast.Name)}
                if node.value is not None:
                    self.assignments.append((names, node.value))
                if "pytestmark" in names and node.value is not None and self.has_guard(node.value):
                    self.marked = True

    def names_data(self, node: ast.AST) -> bool:
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name) and inner.id in self.tainted:
                return True
            if isinstance(inner, ast.Constant) and isinstance(inner.value, str) and id(inner) not in self.docstrings:
                if DATA_PATH.search(inner.value):
                    return True
        return False

    @staticmethod
    def has_guard(node: ast.AST) -> bool:
        return any(
            (isinstance(inner, ast.Name) and inner.id in GUARDS)
            or (isinstance(inner, ast.Attribute) and inner.attr in GUARDS)
            for inner in ast.walk(node)
        )

    def all_functions(self) -> list[Function]:
        return [*self.functions.values(), *self.methods]


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    return [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]


def _summarize(module: Module, function: Function) -> None:
    node = function.node
    positional = [*node.args.posonlyargs, *node.args.args]
    defaults = dict(zip(positional[len(positional) - len(node.args.defaults) :], node.args.defaults, strict=True))
    defaults |= {arg: d for arg, d in zip(node.args.kwonlyargs, node.args.kw_defaults, strict=True) if d is not None}
    position = {arg.arg: (positional.index(arg) if arg in positional else -1) for arg in _parameters(node)}
    for arg, default in defaults.items():
        if module.names_data(default):
            function.default_reads[arg.arg] = position[arg.arg]
    conditional: set[int] = set()  # nodes under `if <parameter>:`
    for inner in ast.walk(node):
        if isinstance(inner, ast.If) and isinstance(inner.test, ast.Name) and inner.test.id in position:
            if any(module.names_data(statement) for statement in inner.body):
                function.conditional_reads[inner.test.id] = position[inner.test.id]
                conditional |= {id(n) for statement in inner.body for n in ast.walk(statement)}
    callee_names = set()
    for inner in ast.walk(node):
        if id(inner) in conditional:
            continue
        if isinstance(inner, ast.Call):
            function.calls.append(inner)
            callee_names.add(id(inner.func))
    for statement in node.body:
        for inner in ast.walk(statement):
            if id(inner) in conditional:
                continue
            if isinstance(inner, ast.Name) and inner.id in module.tainted:
                function.direct = True
            elif (
                isinstance(inner, ast.Constant) and isinstance(inner.value, str) and id(inner) not in module.docstrings
            ):
                function.direct |= bool(DATA_PATH.search(inner.value))
            elif isinstance(inner, ast.Name) and id(inner) not in callee_names:
                function.referenced.add(inner.id)


class Suite:
    """Every test module, with the reads of each function followed through the helpers it calls."""

    def __init__(self, folder: Path):
        self.modules = {path.stem: Module(path) for path in sorted(folder.glob("*.py"))}
        self._spread_names()
        for module in self.modules.values():
            for function in module.all_functions():
                _summarize(module, function)
        self._reads: dict[int, bool] = {}

    def _spread_names(self) -> None:
        """Which module-level names reach the data: built from one, or imported as one (until no more)."""
        changed = True
        while changed:
            changed = False
            for module in self.modules.values():
                before = len(module.tainted)
                for names, value in module.assignments:
                    if module.names_data(value):
                        module.tainted |= names
                for local, (other, original) in module.imports.items():
                    if other in self.modules and original in self.modules[other].tainted:
                        module.tainted.add(local)
                changed |= len(module.tainted) != before

    def resolve(self, module: Module, name: str) -> Function | None:
        """The test-suite function `name` means in `module` (its own or imported from a tests module)."""
        if name in module.functions:
            return module.functions[name]
        if name in module.imports:
            other, original = module.imports[name]
            if other in self.modules:
                return self.resolve(self.modules[other], original)
        return None

    def call_reads(self, module: Module, call: ast.Call) -> bool:
        callee = self.resolve(module, call.func.id) if isinstance(call.func, ast.Name) else None
        if callee is None:
            return False
        if self.reads(callee):
            return True
        given = {keyword.arg for keyword in call.keywords}
        passed = lambda name, index: name in given or 0 <= index < len(call.args)  # noqa: E731
        if any(not passed(name, index) for name, index in callee.default_reads.items()):
            return True
        for name, index in callee.conditional_reads.items():
            value = next((k.value for k in call.keywords if k.arg == name), None)
            if value is None and 0 <= index < len(call.args):
                value = call.args[index]
            if not (isinstance(value, ast.Constant) and not value.value):
                return True
        return False

    def reads(self, function: Function) -> bool:
        """Whether calling `function` (as its callers do, whatever guards them) reaches the data."""
        key = id(function.node)
        if key not in self._reads:
            self._reads[key] = False  # recursion: what is being decided does not read
            module = self.modules[function.module]
            self._reads[key] = (
                function.direct
                or any(self.call_reads(module, call) for call in function.calls)
                or any(
                    (callee := self.resolve(module, name)) is not None and self.reads(callee)
                    for name in function.referenced
                )
                or any(fixture is not None and self.reads(fixture) for fixture in self.fixtures_of(function))
            )
        return self._reads[key]

    def guarded(self, function: Function) -> bool:
        """Whether the test skips, saying how to supply the data, before it could read it: its mark, its
        own skip, or a fixture it requests that skips (set up first: the guarded fixtures are session-wide)."""
        module = self.modules[function.module]
        if module.marked or Module.has_guard(function.node):
            return True
        if function.owner is not None and any(Module.has_guard(d) for d in function.owner.decorator_list):
            return True
        return any(fixture is not None and self.guarded(fixture) for fixture in self.fixtures_of(function))

    def fixtures_of(self, function: Function) -> list[Function | None]:
        """The fixtures a test or fixture requests by its parameters (its module's own, else conftest's)."""
        if not (function.is_test() or function.is_fixture()):
            return []
        module, conftest = self.modules[function.module], self.modules.get("conftest")
        found: list[Function | None] = []
        for arg in _parameters(function.node):
            for candidate in (module.functions.get(arg.arg), conftest.functions.get(arg.arg) if conftest else None):
                if candidate is not None and candidate.is_fixture() and candidate is not function:
                    found.append(candidate)
                    break
        return found

    def unguarded(self) -> list[str]:
        """`file:line name` of each test reaching the data (itself, through a helper or a fixture) without
        a guard, and of each decorator that reads it as the module is imported."""
        found = []
        for module in self.modules.values():
            if f"{module.name}.py" in EXEMPT or not module.name.startswith("test_"):
                continue
            for function in module.all_functions():
                if function.is_test() and self.reads(function) and not self.guarded(function):
                    found.append(f"tests/{module.name}.py:{function.node.lineno} {function.name}")
                for decorator in function.node.decorator_list:
                    if any(self.call_reads(module, call) for call in ast.walk(decorator) if isinstance(call, ast.Call)):
                        found.append(f"tests/{module.name}.py:{decorator.lineno} {function.name}'s decorator")
        return found


def test_every_test_that_reads_the_benchmark_data_goes_through_the_guard() -> None:
    unguarded = Suite(TESTS).unguarded()
    assert not unguarded, (
        "these read the JudgeBench data without the guard (a clone without the data fails them): mark them "
        "@requires_shared, or skip with NO_DATA_REASON when not shared_data_available() (tests/conftest.py):\n"
        + "\n".join(unguarded)
    )


UNGUARDED = """
from tests._runs import GPT4O_PATH
from tests.conftest import make_repo, requires_shared

def pairs(tmp_path):
    return GPT4O_PATH.read_text()

def test_reads_through_a_helper(tmp_path):
    pairs(tmp_path)

@requires_shared
def test_guarded(tmp_path):
    pairs(tmp_path)

def test_own_data_only(tmp_path):
    make_repo(tmp_path, {"data/x.jsonl": "{}"}, copy_shared=False)

def test_copies_the_benchmark(tmp_path):
    make_repo(tmp_path)

def test_a_literal_path():
    open("../shared/judgebench/data/x.jsonl")
"""


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (UNGUARDED, ["test_reads_through_a_helper", "test_copies_the_benchmark", "test_a_literal_path"]),
        ("from tests.conftest import requires_shared\npytestmark = requires_shared\n" + UNGUARDED, []),
    ],
)
def test_the_check_finds_reads_without_the_guard(tmp_path: Path, source: str, expected: list[str]) -> None:
    """The check itself: a read through a helper, a copy of the benchmark and a literal path are found;
    a guarded test, and a helper told not to copy the data, are not."""
    for helper in ("_runs.py", "conftest.py", "_benchmark_data.py"):
        (tmp_path / helper).write_text((TESTS / helper).read_text())
    (tmp_path / "test_sample.py").write_text(source)
    found = [entry.split(" ", 1)[1] for entry in Suite(tmp_path).unguarded()]
    assert found == expected
