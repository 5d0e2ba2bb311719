"""The architecture's rules, read from the imports (ast): no cycles, and each part knows only what it may.

- No import cycles among the project's modules (imports at module level; an import inside a
  function is a deliberate late binding and is listed by `test_late_imports_do_not_hide_a_cycle`).
- Bindings (dbsurge.targets) know nothing of Locust, shapes or collectors.
- Shapes know nothing of databases (no targets, workloads or drivers).
- Workloads are plain Python: no Locust.
- Measurement (dbsurge.measure) has no Locust and writes no files.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = {"dbsurge": REPO / "dbsurge", "dbsurge.collectors": REPO / "collectors",
            "dbsurge.shapes": REPO / "shapes", "dbsurge.locustfiles": REPO / "locustfiles"}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg, root in PACKAGES.items():
        for path in root.rglob("*.py"):
            rel = path.relative_to(root).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([pkg, *parts])
            if pkg == "dbsurge" and parts and parts[0] in ("collectors", "shapes", "locustfiles"):
                continue
            out[name] = path
    return out


MODULES = _modules()


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    is_pkg = MODULES[module].name == "__init__.py"
    base = base if is_pkg else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _imports(module: str, top_level_only: bool) -> set[str]:
    tree = ast.parse(MODULES[module].read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.If) and top_level_only:  # `if TYPE_CHECKING:` blocks do not run
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names)
    return found


def _project_edges(top_level_only: bool) -> dict[str, set[str]]:
    return {m: {t for t in _imports(m, top_level_only) if t in MODULES and t != m} for m in MODULES}


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    cycles, state, stack = [], {}, []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)
    return cycles


def test_no_import_cycles():
    assert _cycles(_project_edges(top_level_only=True)) == []


def test_late_imports_do_not_hide_a_cycle():
    """Imports inside functions may point back up (a listener calling the module that owns the work), but only
    along these known edges; a new one is a design decision to make here, not by accident."""
    late = _project_edges(top_level_only=False)
    top = _project_edges(top_level_only=True)
    back_edges = sorted((a, b) for cycle in _cycles(late) for a, b in zip(cycle, cycle[1:]) if b not in top[a])
    allowed_targets = {"dbsurge.finish", "dbsurge.stopping", "dbsurge.user", "dbsurge.collectors.report",
                       "dbsurge.collectors.merge", "dbsurge.collectors.cost", "dbsurge.collectors.cloudwatch",
                       "dbsurge.workloads", "dbsurge.side", "dbsurge.web", "dbsurge.prometheus", "dbsurge.spot",
                       "dbsurge.embedded", "dbsurge.targets", "dbsurge.lifecycle", "dbsurge.locust_plugin",
                       "dbsurge.scenarios", "dbsurge.cli", "dbsurge.collectors.cli", "dbsurge.collectors.compare", "dbsurge.repeat", "dbsurge.rerun"}
    unexpected = [(a, b) for a, b in back_edges if not any(b == t or b.startswith(t + ".") for t in allowed_targets)]
    assert unexpected == []


def _all_imports(prefix: str) -> dict[str, set[str]]:
    return {m: _imports(m, top_level_only=False) for m in MODULES if m == prefix or m.startswith(prefix + ".")}


def _offenders(prefix: str, banned: tuple[str, ...]) -> dict[str, list[str]]:
    out = {}
    for m, imps in _all_imports(prefix).items():
        bad = sorted(i for i in imps if any(i == b or i.startswith(b + ".") for b in banned))
        if bad:
            out[m] = bad
    return out


def test_bindings_know_nothing_of_locust_shapes_or_collectors():
    assert _offenders("dbsurge.targets", ("locust", "dbsurge.shapes", "dbsurge.collectors", "dbsurge.locust_plugin",
                                          "dbsurge.run_state", "dbsurge.user", "dbsurge.pacer")) == {}


def test_shapes_know_nothing_of_databases():
    assert _offenders("dbsurge.shapes", ("dbsurge.targets", "dbsurge.workloads", "psycopg", "pymongo")) == {}


def test_workloads_are_plain_python():
    assert _offenders("dbsurge.workloads", ("locust", "dbsurge.locust_plugin", "dbsurge.run_state")) == {}


def test_measurement_has_no_locust_and_no_files():
    assert _offenders("dbsurge.measure", ("locust", "gevent", "dbsurge.rundir", "dbsurge.locust_plugin")) == {}
    for m in _all_imports("dbsurge.measure"):
        assert "open(" not in MODULES[m].read_text(), f"{m} opens a file"


#: The modules that may spell a run directory's file names in a string: the schema, which owns them.
RUN_DIRECTORY_NAMERS = {"dbsurge.rundir.schema"}
#: A run directory's files as they are spelled (schema's names, any CSV, JSON-lines or HdrHistogram log, metrics/).
_RUN_FILE = re.compile(r"\.(csv|jsonl|hlog)\b|metrics/|run\.json|summary\.md|report\.html|timeline\.png"
                       r"|longrun\.(settings|state)\.json")


def _non_docstring_strings(tree: ast.AST) -> list[str]:
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def test_one_module_spells_the_run_directory_s_file_names():
    """Every other module names a run directory's files through `dbsurge.rundir.schema`'s constants (in
    messages and help texts too, as f-strings); docstrings may name them as they are. At most 4 modules spell
    them, and today only the schema does."""
    spelling = sorted(m for m, path in MODULES.items()
                      if any(_RUN_FILE.search(s) for s in _non_docstring_strings(ast.parse(path.read_text()))))
    assert len(spelling) <= 4
    assert set(spelling) <= RUN_DIRECTORY_NAMERS, spelling
