"""The package list is found, not kept by hand (pyproject.toml holds everything else).

The engine is ``dbsurge/``; ``locustfiles/``, ``shapes/`` and ``collectors/`` stay at the top of the
repository (Locust users pass them with ``-f``) and install as ``dbsurge.locustfiles``,
``dbsurge.shapes`` and ``dbsurge.collectors``, so ``dbsurge run`` finds them in any install. Every
package under those four roots goes into the wheel, and every file in them that is not Python
source is package data: a new module or a new data file ships without an edit here.
``tests/test_install.py`` builds the wheel and compares its files with the tree's.
"""

from __future__ import annotations

import runpy
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
#: installed package prefix -> folder in the source tree (the folders beside the engine: dbsurge/layout.py,
#: read by path: building the wheel imports nothing of dbsurge)
ROOTS = {"dbsurge": "dbsurge",
         **{f"dbsurge.{folder}": folder for folder in runpy.run_path(str(HERE / "dbsurge" / "layout.py"))["BESIDE"]}}
SKIP = {"__pycache__"}


def _packages() -> dict[str, str]:
    """Every package under the roots -> its folder, subpackages of the top-level folders included."""
    found: dict[str, str] = {}
    for name, folder in ROOTS.items():
        found[name] = folder
        for sub in find_packages(where=str(HERE / folder)):
            found[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"
    return found


def _data_files(folder: str) -> list[str]:
    """The files of one package folder (not its subpackages') that are not Python: web assets, TOML, READMEs."""
    base = HERE / folder
    return sorted(p.name for p in base.iterdir()
                  if p.is_file() and p.suffix not in (".py", ".pyc") and not p.name.startswith("."))


PACKAGES = _packages()
setup(packages=sorted(PACKAGES), package_dir=PACKAGES,
      package_data={name: _data_files(folder) for name, folder in PACKAGES.items() if _data_files(folder)})
