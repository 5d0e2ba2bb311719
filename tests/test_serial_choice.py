"""conftest's choice of the tests that run alone names tests that exist.

A timing test that is renamed and no longer matches `SERIAL_TESTS` would silently run beside
another test and measure it: the names are checked against the test modules' own functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import SERIAL_MODULES, SERIAL_TESTS

TESTS = Path(__file__).resolve().parent


def _test_functions(module: str) -> set[str]:
    tree = ast.parse((TESTS / f"{module}.py").read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_every_serial_module_and_test_exists():
    for module in SERIAL_MODULES:
        assert _test_functions(module), f"{module}: no such test module, or no tests in it"
    for module, names in SERIAL_TESTS.items():
        missing = names - _test_functions(module)
        assert not missing, f"{module}: SERIAL_TESTS names tests it does not have: {sorted(missing)}"
        assert module not in SERIAL_MODULES, f"{module} is both a serial module and in SERIAL_TESTS"
