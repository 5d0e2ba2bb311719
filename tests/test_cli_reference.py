"""`dbsurge --help` and `dbsurge run --help` are the reference; `dbsurge run` reads files and the environment.

The help is compared with the README (and docs/) both ways, and the configuration story is run
as the issue tells it: ``DBSURGE_RATE=80 dbsurge run ... --shape constant`` and ``--config FILE``
with the target in the file, in Locust's precedence (file < environment < command line).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from runs import REPO, dbsurge, explain, only_run_dir, read_csv

OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def _options_in(text: str) -> set[str]:
    return set(OPTION.findall(text))


def _help(*args: str) -> str:
    proc = dbsurge(*args, "--help", cwd=REPO, timeout=60)
    assert proc.returncode == 0, explain(proc)
    return proc.stdout


def _dbsurge_option_flags() -> set[str]:
    """Every flag dbsurge defines for a run: the plugin's (dbsurge.config.options) and dbsurge run's own."""
    from dbsurge.config.options import add_options
    from dbsurge.engine.run_command import RUN_OPTIONS
    from dbsurge.engine.validate import _PlainParser

    p = _PlainParser(add_help=False)
    add_options(p)
    flags = {s for a in p._actions for s in a.option_strings if s.startswith("--")}
    return flags | {f for _, fl, _ in RUN_OPTIONS for f in fl if f.startswith("--")}


def _locust_flags() -> set[str]:
    code = ("import os; os.environ['LOCUST_SKIP_MONKEY_PATCH']='1'\n"
            "from locust.argument_parser import get_parser\n"
            "print(' '.join(s for a in get_parser()._actions for s in a.option_strings))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    return set(out.stdout.split())


def test_top_help_lists_each_command_in_one_plain_line():
    from dbsurge.commands.cli import COMMANDS

    text = _help()
    assert "``" not in text and ":func:" not in text  # no RST
    for name in COMMANDS:
        lines = [ln for ln in text.splitlines() if ln.strip().startswith(name + " ")]
        assert len(lines) == 1, (name, text)


def test_run_help_lists_every_option_grouped_with_env_aliases():
    from dbsurge.config.options import GROUPS

    text = _help("run")
    shown = _options_in(text)
    missing = _dbsurge_option_flags() - shown
    assert not missing, missing
    for title in GROUPS.values():
        assert f"\n{title}:\n" in text, title
    for env in ("DBSURGE_RATE", "DBSURGE_TARGET", "DBSURGE_STAGES", "DBSURGE_PROMETHEUS_PORT"):
        assert env in text
    assert "default 1000" in " ".join(text.split())  # --baseline-tps
    # the ones the issue found only in the README
    for flag in ("--baseline-tps", "--stages", "--stage-seconds", "--rate", "--check", "--workload-option",
                 "--web-host", "--config"):
        assert flag in shown, flag


def test_help_and_readme_agree():
    readme = (REPO / "README.md").read_text()
    docs = readme + "".join(p.read_text() for p in sorted((REPO / "docs").glob("*.md")))
    run_help = _options_in(_help("run"))
    # every dbsurge run option in the help is documented somewhere
    undocumented = {f for f in run_help if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", docs)}
    assert not undocumented, f"in `dbsurge run --help` but not in README.md or docs/: {sorted(undocumented)}"
    # every option the README mentions exists: in dbsurge run's help, another command's, or Locust's
    known = run_help | _options_in(_help("load")) | _options_in(_help("scenario")) | _locust_flags()
    for name in ("spike", "idle", "cache", "rewarm", "longscan", "ycsb-load", "ycsb-run", "capacity", "longrun"):
        known |= _options_in(_help("scenario", name))
    for args in (("rerun",), ("compare",), ("worker",), ("report",), ("cost",), ("collect",), ("embedded",),
                 *(("runners", verb) for verb in ("up", "status", "down", "verify"))):
        known |= _options_in(_help(*args))
    # shell lines for other tools (`aws secretsmanager create-secret --name ...`) are not dbsurge's
    readme_dbsurge = "\n".join(ln for ln in readme.splitlines() if not ln.lstrip().startswith("aws "))
    unknown = _options_in(readme_dbsurge) - known
    assert not unknown, f"README.md mentions options no help lists: {sorted(unknown)}"


def test_precedence_file_environment_command_line(tmp_path: Path):
    """Locust's order, as dbsurge run's checks see it (no run: the namespace the child would parse)."""
    conf = tmp_path / "ux.conf"
    conf.write_text("target = postgresql://file@127.0.0.1/db\nrate = 50\nbaseline-tps = 300\n")
    code = ("import sys, json; from dbsurge.engine.run_command import locust_namespace\n"
            "ns = locust_namespace(sys.argv[1:])\n"
            "print(json.dumps([ns.target, ns.rate, ns.baseline_tps]))")

    def parse(*args: str, env: dict | None = None) -> list:
        import os

        full = {k: v for k, v in os.environ.items() if not k.startswith("DBSURGE_")}
        out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60,
                             env={**full, **(env or {})}, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    assert parse("--config", str(conf)) == ["postgresql://file@127.0.0.1/db", 50.0, 300.0]
    assert parse("--config", str(conf), env={"DBSURGE_RATE": "80"})[1:] == [80.0, 300.0]
    assert parse("--config", str(conf), "--rate", "30", env={"DBSURGE_RATE": "80"})[1] == 30.0
    (tmp_path / "locust.conf").write_text("rate = 7\n")  # read from the working directory without --config
    assert parse()[1] == 7.0


def _planned_tps(results: Path) -> float:
    rows = [r for r in read_csv(only_run_dir(results) / "stages.csv") if r["operation"] == "ALL"]
    assert len(rows) == 1, rows
    return float(rows[0]["target_tps"])


def test_rate_from_the_environment(pg_uri: str, tmp_path: Path):
    results = tmp_path / "results"
    proc = dbsurge("run", "--workload", "orders", "--target", pg_uri, "--shape", "constant", "--duration", "2s",
                   "--quiet", "--results-dir", str(results), cwd=tmp_path, env={"DBSURGE_RATE": "40"})
    assert proc.returncode == 0, explain(proc)
    assert _planned_tps(results) == 40.0


def test_target_and_rate_from_a_config_file(pg_uri: str, tmp_path: Path):
    results = tmp_path / "results"
    conf = tmp_path / "ux.conf"
    conf.write_text(f"target = {pg_uri}\nrate = 50\nrun-time = 2s\nresults-dir = {results}\n")
    proc = dbsurge("run", "--workload", "orders", "--shape", "constant", "--config", str(conf), "--quiet",
                   cwd=tmp_path, env={"DBSURGE_RATE": "30"})
    assert proc.returncode == 0, explain(proc)
    assert _planned_tps(results) == 30.0  # the environment over the file
    # a bad value in the file is caught before load, with the option's name
    conf.write_text(f"target = {pg_uri}\nrate = nan\n")
    proc = dbsurge("run", "--workload", "orders", "--shape", "constant", "--config", str(conf), "--duration", "2s",
                   cwd=tmp_path)
    assert proc.returncode == 2 and "argument --rate: expected a number in ASCII digits" in proc.stderr, explain(proc)
