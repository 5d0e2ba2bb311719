"""The architecture's rules, read from the imports (ast): no cycles, and each part knows only what it may.

- Layers (`LAYERS`, bottom to top): every import, late or not, points down or within its layer, and no import
  cycles, among modules or among parts (a late import only defers a heavy library, never points up).
- Bindings (dbsurge.targets) know nothing of Locust, shapes or collectors.
- Shapes know nothing of databases (no targets, workloads or drivers).
- Workloads are plain Python: no Locust.
- Measurement (dbsurge.measure) has no Locust and writes no files.
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
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


@functools.cache
def _tree(module: str) -> ast.Module:
    return ast.parse(MODULES[module].read_text())


@functools.cache
def _imports(module: str, top_level_only: bool) -> frozenset[str]:
    tree = _tree(module)
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
    return frozenset(found)


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


#: The layers, bottom to top, each a list of parts (a part = a package of dbsurge, or a module at its root): a module may
#: import its own layer's modules and those of the layers below, never those above. Every import counts: at module
#: level, inside a function, under ``if TYPE_CHECKING``. A name ending in ``.`` is a package with all it holds.
LAYERS: list[dict[str, tuple[str, ...]]] = [
    {"base": ("base.", "layout")},
    {"config": ("config.",)},
    {"plan": ("plan.",), "distributions": ("distributions.",), "measure": ("measure.",)},
    {"targets": ("targets.",), "workloads": ("workloads.",), "embedded": ("embedded.",)},
    {"rundir": ("rundir.",)},
    {"load": ("load.",)},
    {"engine": ("engine.",)},
    {"cloud": ("cloud.",), "ui": ("ui.",)},
    {"collectors": ("collectors.",)},
    {"scenarios": ("scenarios.",)},
    {"commands": ("commands.", "locust_plugin")},
    {"locustfiles": ("locustfiles.",), "shapes": ("shapes.",)},
]


def _part_of(module: str) -> tuple[int, str] | None:
    """(layer, part) of a project module; ``dbsurge`` itself (the version string) stands below them all."""
    if module == "dbsurge":
        return None
    name = module.removeprefix("dbsurge.")
    for layer, parts in enumerate(LAYERS):
        for part, members in parts.items():
            for member in members:
                if name == member or (member.endswith(".") and (name == member[:-1] or name.startswith(member))):
                    return layer, part
    raise AssertionError(f"{module} is in no layer of LAYERS")


def _edges() -> dict[str, set[str]]:
    """Every import between the project's modules (at module level or late)."""
    return _project_edges(top_level_only=False)


def test_every_module_has_a_layer():
    assert [m for m in MODULES if m != "dbsurge" and _part_of(m) is None] == []


def test_every_import_points_down_the_layers():
    upward = sorted(f"{a} -> {b}" for a, targets in _edges().items() for b in targets
                    if _part_of(a) and _part_of(b) and _part_of(b)[0] > _part_of(a)[0])
    assert upward == []


def test_no_import_cycles():
    """Counting every import, late ones included, between modules and between parts."""
    edges = _edges()
    assert _cycles(edges) == []
    parts: dict[str, set[str]] = {}
    for a, targets in edges.items():
        if _part_of(a):
            parts.setdefault(_part_of(a)[1], set()).update(_part_of(b)[1] for b in targets if _part_of(b))
    assert _cycles({p: targets - {p} for p, targets in parts.items()}) == []


@functools.cache
def _third_party(module: str) -> frozenset[str]:
    """The third-party libraries importing `module` loads (module-level imports, its packages' too)."""
    found: set[str] = set()
    seen: set[str] = set()
    todo = [module]
    while todo:
        m = todo.pop()
        if m in seen or m not in MODULES:
            continue
        seen.add(m)
        imports = _imports(m, top_level_only=True)
        found |= {i.split(".")[0] for i in imports
                  if i.split(".")[0] not in sys.stdlib_module_names and i.split(".")[0] != "dbsurge"}
        todo += [".".join(m.split(".")[:k]) for k in range(1, m.count(".") + 1)]
        todo += [i for i in imports if i in MODULES]
    return frozenset(found)


def _late_imports(module: str) -> list[ast.ImportFrom | ast.Import]:
    """The imports inside functions (an ``if TYPE_CHECKING:`` block at module level runs nothing: not late)."""
    tree = _tree(module)
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    return [n for f in functions for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_a_late_import_defers_a_third_party_library():
    """An import inside a function is there to keep a library (pandas, boto3, a driver, Locust) off the import
    path: what it loads must bring a third-party library the module does not load already. Never to break a cycle
    (there is none) nor to point up (the layers)."""
    needless = []
    for module in sorted(MODULES):
        loaded = _third_party(module)
        for node in _late_imports(module):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                base = _resolve(module, node)
                names = [base, *(f"{base}.{a.name}" for a in node.names)]
            ours = [n for n in names if n in MODULES]
            if not ours:  # a library itself: needless when the module loads that library already
                if names[0].split(".")[0] in loaded:
                    needless.append(f"{module}:{node.lineno} {ast.unparse(node)}")
                continue
            if not set().union(*(_third_party(n) for n in ours)) - loaded:
                needless.append(f"{module}:{node.lineno} {ast.unparse(node)}")
    assert needless == []


def test_no_part_imports_another_part_s_private_name():
    """A name with a leading underscore is its module's own; what another part uses has a public name (the CQL
    driver's loader, the histogram's bucket values, the weight's number pattern were private and imported)."""
    private = []
    for module in sorted(MODULES):
        for node in ast.walk(_tree(module)):
            if not isinstance(node, ast.ImportFrom):
                continue
            source = _resolve(module, node)
            if source not in MODULES or _part_of(source) == _part_of(module):
                continue
            private += [f"{module} <- {source}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert private == []


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
                                          "dbsurge.engine.run_state", "dbsurge.load.user", "dbsurge.load.pacer")) == {}


def test_shapes_know_nothing_of_databases():
    assert _offenders("dbsurge.shapes", ("dbsurge.targets", "dbsurge.workloads", "psycopg", "pymongo")) == {}


def test_workloads_are_plain_python():
    assert _offenders("dbsurge.workloads", ("locust", "dbsurge.locust_plugin", "dbsurge.engine.run_state")) == {}


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


def _attributes_set(cls: ast.ClassDef) -> set[str]:
    """The ``self.X`` a class's own methods assign (``self.X = ...``, ``self.X: T = ...``, ``self.X += ...``)."""
    names = set()
    for fn in cls.body:
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
            for t in targets:
                for leaf in ast.walk(t):
                    if isinstance(leaf, ast.Attribute) and isinstance(leaf.value, ast.Name) and leaf.value.id == "self":
                        names.add(leaf.attr)
    return names


def test_no_class_sets_more_than_35_attributes():
    """A class that holds more is several things at once (the run object once set 69 for every role)."""
    sizes = {}
    for m, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                sizes[f"{m}.{node.name}"] = len(_attributes_set(node))
    assert sizes, "no classes found"
    assert {name: n for name, n in sizes.items() if n > 35} == {}


def test_the_map_names_every_package_and_module():
    """docs/architecture.md's table of packages is the newcomer's map: every package and module of the tree is in
    it, and it names nothing that is not there."""
    doc = (REPO / "docs" / "architecture.md").read_text()
    table = doc[doc.index("## The packages"):doc.index("## One operation, followed")]
    rows = dict(re.findall(r"^\| `([^`]+)` \| (.*) \|$", table, flags=re.M))
    roots = {f"{p.name}/": p for p in (REPO / "dbsurge").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    roots["collectors/"] = REPO / "collectors"
    assert {name for name in rows if name.endswith("/")} == set(roots)
    missing = [f"{pkg}{path.stem}" for pkg, root in roots.items() for path in sorted(root.glob("*.py"))
               if path.stem != "__init__" and f"`{path.stem}`" not in rows[pkg]]
    assert missing == []
    loose = sorted(p.name for p in (REPO / "dbsurge").glob("*.py") if p.stem != "__init__")
    assert loose == ["layout.py", "locust_plugin.py"]  # the root holds the map of the folders and the composition root
    assert all(name in rows for name in loose)


def test_the_drivers_load_with_the_binding_that_uses_them():
    """A Locust process imports the plugin, every workload and the targets' registry; no database driver comes with
    them (a worker against MongoDB has no use for psycopg), nor with the command line's start."""
    probe = ("import sys, dbsurge.locust_plugin, dbsurge.commands.cli; "
             "print(sorted(m for m in ('psycopg', 'pymongo', 'cassandra', 'boto3') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout


def test_the_map_names_every_control_message():
    """docs/architecture.md's table of messages names each message of the wire once, and nothing else."""
    doc = (REPO / "docs" / "architecture.md").read_text()
    table = doc[doc.index("Every message there is"):doc.index("The close, followed")]
    named = re.findall(r"^\| `(\w+)` \|", table, flags=re.MULTILINE)
    probe = "from dbsurge.engine import wire; print(' '.join(sorted(c.__name__ for c in wire.MESSAGES.values())))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert sorted(named) == out.stdout.split() and len(named) == len(set(named)), (named, out.stdout)
