"""Unknown option names: refused before anything starts, in one line naming the nearest real option.

The command line, config files and the options a scenario passes on to its steps; a ``DBSURGE_*``
variable that no option reads gets a warning; run.json names every config file read.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from runs import dbsurge, explain, only_run_dir, read_json

from dbsurge.config.option_names import nearest, warn_unknown_env


def _refused(proc, line: str, results: Path) -> None:
    """Exit 2, exactly ``line`` on stderr (nothing else: no embedded server started), no run directory."""
    assert proc.returncode == 2, explain(proc)
    assert [x for x in proc.stderr.splitlines() if x.strip()] == [line], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not results.exists() or not any(results.iterdir())


def test_nearest_ignores_the_dashes_every_option_shares():
    options = ["--rate", "--repeat", "--seed", "--p99", "--stage-seconds", "--step-seconds"]
    assert nearest("--ratee", options) == "--rate"
    assert nearest("--stage-second", options) == "--stage-seconds"
    assert nearest("--slo", options) is None  # not --seed: a wrong suggestion is worse than none
    assert nearest("DBSURGE_RATEE", ["DBSURGE_RATE", "DBSURGE_SEED"]) == "DBSURGE_RATE"


def test_an_unknown_dbsurge_variable_is_warned_about():
    out = io.StringIO()
    env = {"DBSURGE_RATEE": "5", "DBSURGE_RATE": "5", "DBSURGE_TEST_X": "1", "DBSURGE_TARGET_FILE": "/s", "PATH": "/"}
    lines = warn_unknown_env({"DBSURGE_RATE", "DBSURGE_TARGET"}, env, out)
    assert lines == ["dbsurge: warning: environment variable DBSURGE_RATEE is ignored (did you mean DBSURGE_RATE?)"]
    assert out.getvalue() == lines[0] + "\n"


RUN = ["run", "--workload", "orders", "--target", "embedded-postgres", "--shape", "constant", "--rate", "5",
       "--duration", "1s"]


def test_an_unknown_option_on_the_command_line(tmp_path):
    results = tmp_path / "results"
    proc = dbsurge(*RUN, "--ratee", "5", "--results-dir", str(results), cwd=tmp_path, timeout=60)
    _refused(proc, "dbsurge: unknown option --ratee (did you mean --rate?)", results)
    proc = dbsurge(*RUN, "--max-lagg=1s", "--results-dir", str(results), cwd=tmp_path, timeout=60)
    _refused(proc, "dbsurge: unknown option --max-lagg (did you mean --max-lag?)", results)


def test_an_unknown_key_in_a_config_file(tmp_path):
    results = tmp_path / "results"
    (tmp_path / "locust.conf").write_text("bogus-option = 5\nrate = 5\n")
    proc = dbsurge(*RUN, "--results-dir", str(results), cwd=tmp_path, timeout=60)
    _refused(proc, "dbsurge: unknown option bogus-option in locust.conf (dbsurge run --help lists every option)",
             results)
    (tmp_path / "locust.conf").write_text("max-lagg = 1s\n")
    proc = dbsurge(*RUN, "--results-dir", str(results), cwd=tmp_path, timeout=60)
    _refused(proc, "dbsurge: unknown option max-lagg in locust.conf (did you mean max-lag?)", results)
    # a short key would silently set the option it abbreviates (workload -> --workload-option)
    (tmp_path / "locust.conf").unlink()
    (tmp_path / "mine.conf").write_text("workload = orders\n")
    proc = dbsurge(*RUN, "--config", "mine.conf", "--results-dir", str(results), cwd=tmp_path, timeout=60)
    _refused(proc, "dbsurge: mine.conf: workload cannot be set in a config file: pass --workload on the command "
                   "line or set DBSURGE_WORKLOAD", results)


@pytest.mark.parametrize("args, line", [
    (["capacity", "--quick", "--slo", "p99<20ms"],
     "dbsurge: unknown option --slo (dbsurge scenario capacity --help lists every option)"),
    (["spike", "--quick", "--repat", "2"], "dbsurge: unknown option --repat (did you mean --repeat?)"),
    (["ycsb-run", "--quick", "--ratee", "5"], "dbsurge: unknown option --ratee (did you mean --rate?)"),
])
def test_a_scenario_never_passes_an_unknown_option_to_its_steps(tmp_path, args, line):
    results = tmp_path / "results"
    proc = dbsurge("scenario", *args, "--target", "embedded-postgres", "--results-dir", str(results), cwd=tmp_path,
                   timeout=60)
    _refused(proc, line, results)


def test_run_json_names_the_config_files_read_and_a_stray_variable_is_warned_about(tmp_path, pg_uri):
    (tmp_path / "locust.conf").write_text("rate = 10\n")
    results = tmp_path / "results"
    proc = dbsurge("run", "--workload", "orders", "--target", pg_uri, "--shape", "constant", "--duration", "1s",
                   "--workload-option", "products=300", "--no-db-sampler", "--quiet", "--results-dir", str(results),
                   cwd=tmp_path, env={"DBSURGE_RATEE": "50"}, timeout=120)
    assert proc.returncode == 0, explain(proc)
    assert ("dbsurge: warning: environment variable DBSURGE_RATEE is ignored (did you mean DBSURGE_RATE?)"
            in proc.stderr.splitlines())
    meta = read_json(only_run_dir(results) / "run.json")
    assert meta["config_files"] == [str((tmp_path / "locust.conf").resolve())]
    assert meta["plan"]["text"] == "1s@10tps"  # the file's rate is the one that ran


@pytest.mark.parametrize("args, line", [
    (["scenario", "cache", "--target", "embedded-mongo", "--readss", "5"],
     "dbsurge: dbsurge scenario cache: unknown option --readss (did you mean --reads?)"),
    (["load", "--workload", "orders", "--taget", "x"], "dbsurge: dbsurge load: unknown option --taget (did you mean "
                                                       "--target?)"),
    (["compare", "a", "b", "--lables", "X,Y"], "dbsurge: dbsurge compare: unknown option --lables (did you mean "
                                               "--labels?)"),
    # the parsers of worker and runners end on the same base: one line, never argparse's usage block
    (["worker", "--master-port"], "dbsurge: dbsurge worker: argument --master-port: expected one argument"),
    (["runners", "up", "--run-id", "r1", "--instance-type", "c6g.large", "--count", "x"],
     "dbsurge: dbsurge runners up: argument --count: invalid int value: 'x'"),
    (["runners", "bogus"], "dbsurge: dbsurge runners: argument action: invalid choice: 'bogus' (choose from 'up', "
                           "'status', 'down', 'verify')"),
])
def test_every_command_names_the_nearest_option(tmp_path, args, line):
    proc = dbsurge(*args, cwd=tmp_path, timeout=60)
    _refused(proc, line, tmp_path / "results")


def test_every_dbsurge_variable_the_code_reads_is_known():
    """A DBSURGE_* name written in the code is an option's alias or listed as internal: no false warning."""
    import re
    import subprocess
    import sys

    from runs import REPO

    names = set()
    for path in [*REPO.joinpath("dbsurge").rglob("*.py"), *REPO.joinpath("collectors").rglob("*.py")]:
        names |= set(re.findall(r'"(DBSURGE_[A-Z0-9_]*[A-Z0-9])"', path.read_text()))
    code = ("import sys; from locust.argument_parser import get_parser; from dbsurge.config.options import add_options; "
            "from dbsurge.engine.spot_notices import add_spot_options; from dbsurge.config.option_names import known_env, INTERNAL_PREFIXES; "
            "p = get_parser(); add_options(p); add_spot_options(p); k = known_env(p); "
            "print(' '.join(n for n in sys.argv[1:] if n not in k and not n.startswith(INTERNAL_PREFIXES)))")
    out = subprocess.run([sys.executable, "-c", code, *sorted(names)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "", out.stdout + out.stderr
