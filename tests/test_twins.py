"""One of each: a name the code defines twice drifts apart (a retry formula, a duration grammar, an exception,
a JSON conversion); each of these is defined once in the tree, and that one does what both callers need."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from dbsurge.rundir.writer import jsonable

REPO = Path(__file__).resolve().parent.parent


def _definitions(name: str) -> list[str]:
    found = []
    for root in ("dbsurge", "collectors", "locustfiles", "shapes"):
        for path in sorted((REPO / root).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name.lstrip("_") == name:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    return found


@pytest.mark.parametrize("name", ["jsonable", "OperationTimeout"])
def test_defined_once(name):
    assert len(_definitions(name)) == 1, _definitions(name)


def test_jsonable_keeps_what_json_holds_and_gives_the_rest_as_text():
    """The engine's run.json options used to drop a value that was not plain (a dict, a tuple, a path) while a
    scenario's kept it as text: both now keep it, converted the same way."""
    value = {"a": (1, 2.5, None, True), 3: {"p": Path("/tmp/x")}, "s": {"only"}, "t": "text"}
    out = jsonable(value)
    assert out == {"a": [1, 2.5, None, True], "3": {"p": "/tmp/x"}, "s": "{'only'}", "t": "text"}
    assert json.loads(json.dumps(out)) == out


def test_one_operation_timeout_says_whether_its_connection_can_be_trusted():
    """load/user.py and targets/postgres.py had a class each by that name, and `isinstance` checked the wrong one
    by its import; the one class says who ended the operation, and every binding calls it a timeout."""
    from dbsurge.base.errors import OperationTimeout
    from dbsurge.targets import generic_kind, postgres  # not load.user: it imports Locust, which patches with gevent

    assert postgres.OperationTimeout is OperationTimeout
    user_source = (REPO / "dbsurge" / "load" / "user.py").read_text()
    assert "from dbsurge.base.errors import OperationTimeout" in user_source and "exc.interrupted" in user_source
    assert not issubclass(OperationTimeout, OSError)  # psycopg's waits turn an OSError into "socket closed"
    assert OperationTimeout("bound").interrupted and not OperationTimeout("own", interrupted=False).interrupted
    assert generic_kind(OperationTimeout("x")) == "timeout"
