"""A damaged run directory is refused in one line naming the file, by every command that reads one.

One real run (orders at 20 TPS for 2 s against the embedded PostgreSQL) is made per module; each case
copies it and damages one file the way a full disk, a kill, an editor or a wrong copy would (cut short,
emptied, binary, a wrong type, an "abc" cell, junk lines, a broken histogram). Then ``dbsurge report``,
``cost``, ``rerun --dry-run`` and ``compare`` (beside an intact copy) must each exit 2 with one
``dbsurge:`` line that names the damaged file, never print a verdict, and leave every file as it was.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runs import dbsurge, explain

from dbsurge.commands.cli import main
from dbsurge.rundir.reader import check_run_dir
from dbsurge.scenarios import SCENARIOS

Damage = Callable[[Path], None]
SCENARIO_NAMES = sorted(SCENARIOS)


@pytest.fixture(scope="module")
def pristine(pg_uri: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real, small, finished run directory."""
    results = tmp_path_factory.mktemp("pristine")
    proc = dbsurge("run", "--workload", "orders", "--target", pg_uri, "--shape", "constant", "--rate", "20",
                   "--duration", "2s", "--quiet", "--results-dir", str(results), "--run-id", "base",
                   "--workload-option", "products=300", cwd=results, timeout=180)
    assert proc.returncode == 0, explain(proc)
    run = results / "base"
    for name in ("run.json", "stages.csv", "summary.csv", "timeline.csv", "workers.csv", "events.jsonl",
                 "intervals.hlog"):
        assert (run / name).is_file(), name
    check_run_dir(run)  # the real thing passes
    return run


# -- the damage ----------------------------------------------------------------------------------------------------


def cut(name: str, fraction: float) -> Damage:
    """Cut `name` at `fraction` of its length, never just after a line break (that would be a shorter file)."""
    def damage(run: Path) -> None:
        data = (run / name).read_bytes()
        at = max(1, int(len(data) * fraction))
        while at > 1 and data[at - 1:at] == b"\n":
            at -= 1
        (run / name).write_bytes(data[:at])
    return damage


def write(name: str, data: bytes) -> Damage:
    return lambda run: (run / name).write_bytes(data)


def insert(name: str, data: bytes, at: float = 0.5) -> Damage:
    def damage(run: Path) -> None:
        old = (run / name).read_bytes()
        i = int(len(old) * at)
        (run / name).write_bytes(old[:i] + data + old[i:])
    return damage


def meta_set(path: str, value) -> Damage:
    """Set run.json's key at dotted `path` (``plan.stages.0.start_utc``) to `value`."""
    def damage(run: Path) -> None:
        meta = json.loads((run / "run.json").read_text())
        *parents, last = path.split(".")
        obj = meta
        for key in parents:
            obj = obj[int(key)] if isinstance(obj, list) else obj[key]
        if isinstance(obj, list):
            obj[int(last)] = value
        else:
            obj[last] = value
        (run / "run.json").write_text(json.dumps(meta))
    return damage


def cell(name: str, column: str, value: str, line: int = 1) -> Damage:
    """Replace one cell of a CSV file (`line` 1 is the first row after the header)."""
    def damage(run: Path) -> None:
        lines = (run / name).read_text().splitlines()
        header = lines[0].split(",")
        cells = lines[line].split(",")
        assert len(cells) == len(header), "the pristine run's rows hold no commas in cells"
        cells[header.index(column)] = value
        lines[line] = ",".join(cells)
        (run / name).write_text("\n".join(lines) + "\n")
    return damage


def rows(name: str, edit: Callable[[list[str]], list[str]]) -> Damage:
    def damage(run: Path) -> None:
        lines = (run / name).read_text().splitlines()
        (run / name).write_text("\n".join(edit(lines)) + "\n")
    return damage


def drop_column(name: str, column: str) -> Damage:
    def edit(lines: list[str]) -> list[str]:
        i = lines[0].split(",").index(column)
        return [",".join(c for j, c in enumerate(line.split(",")) if j != i) for line in lines]
    return rows(name, edit)


def histogram(encoded: bytes) -> Damage:
    """Replace the first interval's histogram of intervals.hlog."""
    def edit(lines: list[str]) -> list[str]:
        i = next(n for n, line in enumerate(lines) if line.startswith("Tag="))
        lines[i] = lines[i].rsplit(",", 1)[0] + "," + encoded.decode()
        return lines
    return rows("intervals.hlog", edit)


BINARY = bytes(range(256)) * 4
PNG = b"\x89PNG\r\n\x1a\n" + bytes(200)

CASES: dict[str, tuple[str, Damage]] = {}

# run.json: cut short, emptied, not an object, not text, wrong types
for f in (0.02, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99):
    CASES[f"run.json cut at {f:.0%}"] = ("run.json", cut("run.json", f))
for label, data in (("empty", b""), ("blank", b"  \n"), ("a list", b"[]\n"), ("a list of objects", b'[{"run_id": 1}]'),
                    ("a string", b'"run"\n'), ("a number", b"42\n"), ("null", b"null\n"), ("binary", BINARY),
                    ("a png", PNG), ("latin-1", '{"run_id": "caf\u00e9"}'.encode("latin-1")),
                    ("a NUL", b'{"run_id": "a\x00b"}'), ("two objects", b"{}\n{}\n")):
    CASES[f"run.json {label}"] = ("run.json", write("run.json", data))
CASES["run.json a 0xff byte"] = ("run.json", insert("run.json", b"\xff", 0.3))
# nested deeper than the interpreter recurses (a RecursionError, not a ValueError), or than any run.json is
CASES["run.json [ x 100000"] = ("run.json", write("run.json", b"[" * 100_000))
CASES["run.json { x 100000"] = ("run.json", write("run.json", b'{"a":' * 100_000))
CASES["run.json a value nested 100 deep"] = ("run.json", meta_set("options.x", json.loads("[" * 100 + "]" * 100)))
for key, value in (("run_id", 5), ("started_utc", "yesterday"), ("started_utc", [2026]), ("ended_utc", "abc"),
                   ("ended_utc", True), ("command", 5), ("workload", 5), ("target", 5), ("target", ["x"]),
                   ("workload_options", []), ("operations", "product_lookup"), ("operations", [["a"]]),
                   ("operations", [["a", "abc"]]), ("plan", "2s@20tps"), ("plan", []), ("plan.text", 5),
                   ("plan.duration_s", "abc"), ("plan.stages", "abc"), ("plan.stages", [5]),
                   ("plan.stages.0.start_utc", "abc"), ("plan.stages.0.end_utc", float("inf")),
                   ("plan.stages.0.target_tps", "abc"), ("plan.stages.0.duration_s", "2s"),
                   ("plan.stages.0.name", 5), ("arrivals", 5), ("seed", "42"), ("seed", 4.2), ("workers", -1),
                   ("workers", "1"), ("cloudwatch", 5), ("runners", "m7g.large"), ("versions", "x"),
                   ("options", []), ("complete", "yes"), ("complete", 1), ("exit_code", "0"), ("exit_code", 0.5),
                   ("results", "OK"), ("results.planned_operations", "abc"), ("results.ok", -1),
                   ("results.failures", 1.5), ("results.dropped", "0"), ("results.not_sent", []),
                   ("results.failed_by_kind", "x"), ("results.failed_by_kind", {"timeout": "many"}),
                   ("results.not_sent_by_reason", {"interrupted": -3}), ("results.verdict", 0),
                   ("options.max_users", "abc"), ("options.max_users", 2.5), ("options.num_users", "8"),
                   ("options.run_time", "abc"), ("options.processes", "2")):
    CASES[f"run.json {key}={json.dumps(value)}"] = ("run.json", meta_set(key, value))

# the CSV files: cut short, emptied, not text, wrong cells, wrong headers
for name in ("stages.csv", "summary.csv", "timeline.csv", "workers.csv"):
    for f in (0.05, 0.3, 0.6, 0.95):
        CASES[f"{name} cut at {f:.0%}"] = (name, cut(name, f))
    CASES[f"{name} empty"] = (name, write(name, b""))
    CASES[f"{name} binary"] = (name, write(name, BINARY))
    CASES[f"{name} a 0xff byte"] = (name, insert(name, b"\xff"))
    CASES[f"{name} a NUL byte"] = (name, insert(name, b"\x00", 0.8))
    CASES[f"{name} a row too long"] = (name, rows(name, lambda ls: [*ls[:1], ls[1] + ",9", *ls[2:]]))
    CASES[f"{name} a row too short"] = (name, rows(name, lambda ls: [*ls[:1], ls[1].rsplit(",", 1)[0], *ls[2:]]))
    CASES[f"{name} an unknown column"] = (name, rows(name, lambda ls: [ls[0].replace(",", ",plan,", 1),
                                                                        *(line.replace(",", ",1,", 1)
                                                                          for line in ls[1:])]))
    CASES[f"{name} a header twice"] = (name, rows(name, lambda ls: [ls[0], *ls]))
for column in ("planned", "count", "ok", "failures", "dropped", "not_sent", "failed_timeout", "not_sent_interrupted",
               "over_plan", "p99_ms", "max_ms", "achieved_tps", "start_utc", "duration_s", "failure_rate"):
    CASES[f"stages.csv {column}=abc"] = ("stages.csv", cell("stages.csv", column, "abc"))
for column, value in (("planned", "-1"), ("ok", "1.5"), ("p99_ms", "nan"), ("p99_ms", "inf"), ("count", "١٢"),
                      ("ok", "1e400"), ("end_utc", "tomorrow"), ("planned", "0x10")):
    CASES[f"stages.csv {column}={value}"] = ("stages.csv", cell("stages.csv", column, value))
for column in ("ok", "planned", "not_sent"):
    CASES[f"stages.csv without {column}"] = ("stages.csv", drop_column("stages.csv", column))
CASES["stages.csv without operation"] = ("stages.csv", drop_column("stages.csv", "operation"))
for column in ("planned", "p99_ms", "failures"):
    CASES[f"summary.csv {column}=abc"] = ("summary.csv", cell("summary.csv", column, "abc"))
for column in ("time_utc", "count", "p99_ms", "achieved_tps", "failures", "dropped"):
    CASES[f"timeline.csv {column}=abc"] = ("timeline.csv", cell("timeline.csv", column, "abc"))
for column in ("time_utc", "sent", "ok", "assigned"):
    CASES[f"workers.csv {column}=abc"] = ("workers.csv", cell("workers.csv", column, "abc"))

# a collector's metrics (the embedded PostgreSQL's sampler)
CASES["metrics/pg_stat_database.csv time_utc=not-a-time"] = (
    "metrics/pg_stat_database.csv", cell("metrics/pg_stat_database.csv", "time_utc", "not-a-time"))
CASES["metrics/pg_stat_database.csv a row too short"] = ("metrics/pg_stat_database.csv", rows(
    "metrics/pg_stat_database.csv", lambda ls: [*ls[:1], ls[1].rsplit(",", 1)[0], *ls[2:]]))
CASES["metrics/pg_stat_database.csv binary"] = ("metrics/pg_stat_database.csv",
                                                write("metrics/pg_stat_database.csv", BINARY))

# events.jsonl
CASES["events.jsonl junk line"] = ("events.jsonl", insert("events.jsonl", b"this is not json\n", 0.0))
CASES["events.jsonl cut short"] = ("events.jsonl", cut("events.jsonl", 0.9))
CASES["events.jsonl a list"] = ("events.jsonl", rows("events.jsonl", lambda ls: [*ls, "[1, 2]"]))
CASES["events.jsonl a number"] = ("events.jsonl", rows("events.jsonl", lambda ls: [*ls, "7"]))
CASES["events.jsonl kind=5"] = ("events.jsonl", rows("events.jsonl", lambda ls: [*ls, '{"kind": 5}']))
CASES["events.jsonl time=abc"] = ("events.jsonl", rows("events.jsonl",
                                                      lambda ls: [*ls, '{"kind": "x", "time_utc": "abc"}']))
CASES["events.jsonl [ x 100000"] = ("events.jsonl", rows("events.jsonl", lambda ls: [*ls, "[" * 100_000]))
CASES["events.jsonl an event nested 100 deep"] = ("events.jsonl", rows("events.jsonl", lambda ls: [
    *ls, '{"kind": "x", "detail": ' + "[" * 100 + "]" * 100 + "}"]))
CASES["events.jsonl binary"] = ("events.jsonl", write("events.jsonl", BINARY))
CASES["events.jsonl a 0xff byte"] = ("events.jsonl", insert("events.jsonl", b"\xff", 0.5))

# intervals.hlog
CASES["intervals.hlog junk line"] = ("intervals.hlog", rows("intervals.hlog", lambda ls: [*ls, "junk"]))
CASES["intervals.hlog cut short"] = ("intervals.hlog", cut("intervals.hlog", 0.97))
CASES["intervals.hlog binary"] = ("intervals.hlog", write("intervals.hlog", BINARY))
CASES["intervals.hlog start=abc"] = ("intervals.hlog", rows("intervals.hlog", lambda ls: [
    *ls, "Tag=x,abc,1.000,2.0,HISTFAAAACd4nJNpmSzMwMDAzgABzFCaEURcm7yEwf4DROA8D5MzUyYTAHmEBhs="]))
CASES["intervals.hlog max=nan"] = ("intervals.hlog", rows("intervals.hlog", lambda ls: [
    *ls, "Tag=x,1.0,1.000,nan,HISTFAAAACd4nJNpmSzMwMDAzgABzFCaEURcm7yEwf4DROA8D5MzUyYTAHmEBhs="]))
CASES["intervals.hlog not base64"] = ("intervals.hlog", histogram(b"not*base64!"))
CASES["intervals.hlog random bytes"] = ("intervals.hlog", histogram(base64.b64encode(bytes(range(64)))))
CASES["intervals.hlog cut histogram"] = ("intervals.hlog", histogram(base64.b64encode(
    base64.b64decode("HISTFAAAACd4nJNpmSzMwMDAzgABzFCaEURcm7yEwf4DROA8D5MzUyYTAHmEBhs=")[:20])))
CASES["intervals.hlog bad zlib"] = ("intervals.hlog", histogram(base64.b64encode(
    base64.b64decode("HISTFAAAACd4nJNpmSzMwMDAzgABzFCaEURcm7yEwf4DROA8D5MzUyYTAHmEBhs=")[:8] + bytes(39))))


def symlink(name: str, to: str) -> Damage:
    """`name` replaced by a symbolic link to `to` (relative to the run): itself (a loop), or nothing (dangling)."""
    def damage(run: Path) -> None:
        (run / name).unlink()
        (run / name).symlink_to(to)
    return damage


# a link that leads nowhere: Path.exists() says False for it, and it was taken for a missing file
for name in ("run.json", "stages.csv", "summary.csv", "timeline.csv", "workers.csv", "events.jsonl", "intervals.hlog"):
    CASES[f"{name} a symbolic link loop"] = (name, symlink(name, name))
    CASES[f"{name} a dangling symbolic link"] = (name, symlink(name, "gone/" + name))
# the numbers of a newer schema, or no number (scenario --from printed a table of these at exit 0)
CASES["run.json schema=2"] = ("run.json", meta_set("schema", 2))
CASES["stages.csv planned=nan"] = ("stages.csv", cell("stages.csv", "planned", "nan"))
CASES["stages.csv p99_ms=1e400"] = ("stages.csv", cell("stages.csv", "p99_ms", "1e400"))
CASES["stages.csv ok=-5000"] = ("stages.csv", cell("stages.csv", "ok", "-5000"))
CASES["run.json plan=x"] = ("run.json", meta_set("plan", "x"))


def test_the_corpus_is_large():
    assert len(CASES) >= 100, len(CASES)


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _one_line(capsys, code: int, name: str) -> str:
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2, (code, captured.err[-2000:], captured.out[-2000:])
    assert len(lines) == 1 and lines[0].startswith("dbsurge: "), captured.err
    assert name in lines[0], lines[0]
    assert len(lines[0]) < 400, lines[0]
    assert "Verdict" not in captured.out and "OK" not in captured.out, captured.out
    return lines[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_damaged_run_is_refused_by_every_reader(case, pristine, tmp_path, capsys):
    name, damage = CASES[case]
    run = tmp_path / "damaged"
    shutil.copytree(pristine, run)
    intact = tmp_path / "intact"
    shutil.copytree(pristine, intact)
    damage(run)
    before = _snapshot(tmp_path)
    for argv in (["report", str(run)], ["cost", str(run)], ["rerun", str(run), "--dry-run"],
                 ["compare", str(intact), str(run)], ["report", str(intact), str(run)],
                 ["scenario", SCENARIO_NAMES[zlib.crc32(case.encode()) % len(SCENARIO_NAMES)], "--from", str(run)]):
        line = _one_line(capsys, main(argv), f"{run / name}")
        assert "damaged" in line or "cannot be read" in line, line
    assert _snapshot(tmp_path) == before  # nothing written, nothing changed


@pytest.mark.parametrize("scenario", SCENARIO_NAMES)
@pytest.mark.parametrize("case", ["stages.csv a 0xff byte", "run.json plan=x", "run.json schema=2",
                                  "stages.csv planned=nan", "stages.csv p99_ms=1e400", "stages.csv ok=-5000",
                                  "timeline.csv a symbolic link loop", "stages.csv a dangling symbolic link",
                                  "events.jsonl junk line", "intervals.hlog bad zlib"])
def test_every_scenarios_from_goes_through_the_reader(scenario, case, pristine, tmp_path, capsys):
    """``dbsurge scenario NAME --from DIR`` skipped the run-directory reader's checks: bad UTF-8 in stages.csv was
    a UnicodeDecodeError traceback, ``"plan": "x"`` an AttributeError, and schema 2, NaN counts, p99 1e400 and
    ok = -5000 printed a table at exit 0. Now the one line of `dbsurge report`, and nothing written."""
    name, damage = CASES[case]
    run = tmp_path / "damaged"
    shutil.copytree(pristine, run)
    damage(run)
    before = _snapshot(tmp_path)
    line = _one_line(capsys, main(["scenario", scenario, "--from", str(run)]), str(run / name))
    assert "damaged" in line or "cannot be read" in line or "newer" in line, line
    assert _snapshot(tmp_path) == before


def test_a_missing_timeline_is_told(pristine, tmp_path, capsys):
    """A finished run without its timeline.csv rebuilt its report at exit 0 without a word: now a warning."""
    run = tmp_path / "r"
    shutil.copytree(pristine, run)
    (run / "timeline.csv").unlink()
    main(["report", str(run)])
    err = capsys.readouterr().err
    assert f"dbsurge: warning: {run / 'timeline.csv'} is missing" in err, err


def test_the_intact_run_is_read(pristine, tmp_path, capsys):
    """The control: the same commands on the undamaged copy work (so the refusals above are the damage's)."""
    run = tmp_path / "intact"
    shutil.copytree(pristine, run)
    assert main(["report", str(run)]) == 0
    assert main(["cost", str(run)]) == 0
    assert main(["rerun", str(run), "--dry-run"]) == 0
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("case", ["run.json cut at 50%", "run.json [ x 100000", "stages.csv cut at 60%", "stages.csv ok=abc",
                                  "events.jsonl junk line", "intervals.hlog junk line", "timeline.csv binary"])
@pytest.mark.parametrize("command", ["report", "cost", "rerun", "compare"])
def test_real_processes_exit_2_with_one_line(case, command, pristine, tmp_path):
    """The same through the installed entry point, as a user runs it: exit 2, one line, no traceback."""
    name, damage = CASES[case]
    run = tmp_path / "damaged"
    shutil.copytree(pristine, run)
    damage(run)
    args = {"report": [str(run)], "cost": [str(run)], "rerun": [str(run), "--dry-run"],
            "compare": [str(pristine), str(run)]}[command]
    proc = dbsurge(command, *args, cwd=tmp_path, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, explain(proc)
    assert len(lines) == 1 and str(run / name) in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and "Verdict" not in proc.stdout
    assert sys.executable  # the child ran with this interpreter (runs.dbsurge)


def test_rerun_refuses_an_empty_run_id(pristine, tmp_path, capsys):
    run = tmp_path / "intact"
    shutil.copytree(pristine, run)
    assert main(["rerun", str(run), "--dry-run", "--run-id", ""]) == 2
    assert "--run-id is empty" in capsys.readouterr().err


FIXTURE = Path(__file__).parent / "fixtures" / "run_low_rate"
FILES = sorted(p.name for p in FIXTURE.iterdir() if p.is_file())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(FILES), st.sampled_from(["cut", "insert", "replace_line"]), st.floats(0, 1),
       st.binary(max_size=40) | st.text(max_size=40).map(str.encode))
def test_generated_damage_is_refused_or_read(tmp_path_factory, name, how, where, junk):
    """Any damage to a checked-in run's files: `check_run_dir` refuses it in one line or it passes, and a
    run directory that passes is read by the readers (run.json, stages, events) without a traceback."""
    from dbsurge.collectors.rundata import open_run, read_events, read_stages, read_timeline

    from dbsurge.base.errors import UserError

    run = tmp_path_factory.mktemp("gen") / "run"
    shutil.copytree(FIXTURE, run)
    data = (run / name).read_bytes()
    at = int(len(data) * where)
    if how == "cut":
        data = data[:at]
    elif how == "insert":
        data = data[:at] + junk + data[at:]
    else:
        lines = data.split(b"\n")
        lines[min(int(len(lines) * where), len(lines) - 1)] = junk
        data = b"\n".join(lines)
    (run / name).write_bytes(data)
    try:
        check_run_dir(run)
    except UserError as e:
        assert "\n" not in str(e) and name in str(e) and len(str(e)) < 400
        return
    open_run(run)
    read_stages(run)
    read_timeline(run)
    read_events(run)


@pytest.mark.parametrize("name", ["run.json", "events.jsonl", "stages.csv"])
@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_file_that_is_not_a_regular_file_is_refused(name, kind, pristine, tmp_path, capsys):
    """A FIFO (its open waits for a writer) or a link to /dev/zero (endless) in place of a run's file: st_size is
    0 for both, so a size check let them through to a hang or a MemoryError. One line naming the file now."""
    import os

    run = tmp_path / "damaged"
    shutil.copytree(pristine, run)
    (run / name).unlink()
    if kind == "fifo":
        os.mkfifo(run / name)
    else:
        (run / name).symlink_to("/dev/zero")
    for argv in (["report", str(run)], ["cost", str(run)], ["rerun", str(run), "--dry-run"]):
        line = _one_line(capsys, main(argv), f"{run / name}")
        assert "not a regular file" in line, line


def test_a_metrics_reader_names_a_bad_time_itself(pristine, tmp_path):
    """The metrics reader, without `check_run_dir` in front of it: a cell that is not a time is the same one line
    (pandas' DateParseError was a traceback from `report` and `cost`)."""
    from dbsurge.collectors.rundata import read_sampler

    from dbsurge.base.errors import UserError

    run = tmp_path / "damaged"
    shutil.copytree(pristine, run)
    # the first row: a short run on a loaded machine may have sampled only once
    cell("metrics/pg_stat_database.csv", "time_utc", "not-a-time", line=1)(run)
    with pytest.raises(UserError) as e:
        read_sampler(run, "pg_stat_database.csv")
    assert str(e.value).startswith(f"{run / 'metrics' / 'pg_stat_database.csv'} is damaged: line 2, column time_utc: "
                                   f"'not-a-time' is not an ISO 8601 time"), e.value


@pytest.fixture
def read_only_copy(pristine):
    """A copy of the pristine run on a read-only file system (EROFS: root cannot write there either)."""
    import subprocess

    import faults

    reason = faults.tmpfs_unavailable()
    if reason:
        pytest.skip(reason)
    with faults.mount_tmpfs("64m") as mount:
        run = mount / "run"
        shutil.copytree(pristine, run)
        remount = subprocess.run(["mount", "-o", "remount,ro", str(mount)], capture_output=True, text=True,
                                 check=False)
        if remount.returncode != 0:
            pytest.skip(f"cannot remount a tmpfs read-only here: {remount.stderr.strip()}")
        try:
            yield run
        finally:
            subprocess.run(["mount", "-o", "remount,rw", str(mount)], capture_output=True, check=False)


@pytest.mark.parametrize("command", ["report", "cost", "report2"])
def test_a_read_only_run_directory_is_one_line(command, read_only_copy, pristine, capsys):
    """`dbsurge report` on a read-only run directory was an OSError traceback after the work: one line naming
    the directory now, before anything is built, and a non-zero exit."""
    before = _snapshot(read_only_copy)
    argv = {"report": ["report", str(read_only_copy)], "cost": ["cost", str(read_only_copy)],
            "report2": ["report", str(pristine), str(read_only_copy)]}[command]
    code = main(argv)
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2, (code, captured.err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("dbsurge: cannot write "), captured.err
    assert f"into {read_only_copy}: Read-only file system" in lines[0], lines[0]
    assert "Verdict" not in captured.out
    assert _snapshot(read_only_copy) == before


# -- run.json's schema, and a ledger that does not add up -----------------------------------------------------------

def test_run_json_carries_its_schema(pristine):
    from dbsurge.rundir import RUN_SCHEMA

    meta = json.loads((pristine / "run.json").read_text())
    assert meta["schema"] == RUN_SCHEMA and next(iter(meta)) == "schema"


@pytest.mark.parametrize("command", ["report", "cost", "rerun", "compare", "collect"])
def test_a_run_from_a_newer_schema_is_refused_in_one_line(command, pristine, tmp_path, capsys):
    from dbsurge.rundir import RUN_SCHEMA

    run = tmp_path / "newer"
    shutil.copytree(pristine, run)
    meta_set("schema", RUN_SCHEMA + 1)(run)
    before = _snapshot(tmp_path)
    argv = {"report": ["report", str(run)], "cost": ["cost", str(run)], "rerun": ["rerun", str(run), "--dry-run"],
            "compare": ["compare", str(pristine), str(run)], "collect": ["collect", str(run)]}[command]
    code = main(argv)
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, captured.err
    assert lines[0] == (f"dbsurge: {run / 'run.json'} is from a newer dbsurge (schema {RUN_SCHEMA + 1}); this one "
                        f"reads up to {RUN_SCHEMA}: read it with that dbsurge, or upgrade this one")
    assert _snapshot(tmp_path) == before


def test_a_run_json_without_schema_still_reads(pristine, tmp_path, capsys):
    """Run directories written before the schema was: schema 1, read as before."""
    run = tmp_path / "old"
    shutil.copytree(pristine, run)
    meta = json.loads((run / "run.json").read_text())
    del meta["schema"]
    (run / "run.json").write_text(json.dumps(meta))
    assert main(["report", str(run)]) == 0
    assert main(["rerun", str(run), "--dry-run"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert check_run_dir(FIXTURE) is not None  # the checked-in run of before the schema


def _unbalance(name: str, column: str, by: int, operation: str = "ALL") -> Damage:
    """Add `by` to one count of the first `operation` row of `name`: each file still reads, the ledger is off."""
    def damage(run: Path) -> None:
        lines = (run / name).read_text().splitlines()
        header = lines[0].split(",")
        i = next(n for n, line in enumerate(lines[1:], start=1) if line.split(",")[header.index("operation")]
                 == operation)
        cells = lines[i].split(",")
        cells[header.index(column)] = str(int(cells[header.index(column)] or 0) + by)
        lines[i] = ",".join(cells)
        (run / name).write_text("\n".join(lines) + "\n")
    return damage


@pytest.mark.parametrize("name, column, by, words", [
    ("stages.csv", "planned", 7, "planned is"), ("stages.csv", "ok", -3, "count is"),
    ("summary.csv", "planned", -1, "planned is"), ("stages.csv", "dropped", 2, "planned is"),
    ("stages.csv", "failed_timeout", 1, "failures is"), ("stages.csv", "not_sent_interrupted", 4, "not_sent is"),
])
def test_an_unbalanced_ledger_is_no_verdict(name, column, by, words, pristine, tmp_path, capsys):
    """A ledger edited by hand read as "Verdict: OK": now the run directory is inconsistent, exit 2, no verdict."""
    run = tmp_path / "unbalanced"
    shutil.copytree(pristine, run)
    _unbalance(name, column, by)(run)
    for argv in (["report", str(run)], ["cost", str(run)], ["rerun", str(run), "--dry-run"],
                 ["compare", str(pristine), str(run)]):
        line = _one_line(capsys, main(argv), f"{run / name} is inconsistent")
        assert words in line and "the ledger does not balance" in line, line


@pytest.mark.parametrize("kind, words", [("/dev/zero", "is a character device, not a regular file"),
                                         ("fifo", "is a FIFO (named pipe), not a regular file"),
                                         ("binary", "is not UTF-8 text"), ("deep", "nested too deeply")])
def test_cost_prices_file_is_one_line(kind, words, pristine, tmp_path, capsys):
    """`dbsurge cost --prices FILE`, a file the user names: not read whole when it has no end, never a traceback."""
    import os

    run = tmp_path / "run"
    shutil.copytree(pristine, run)
    prices = tmp_path / "prices.toml"
    if kind == "/dev/zero":
        prices = Path("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(prices)
    elif kind == "binary":
        prices.write_bytes(b"[runner_hour]\n\xff\xfe = 1\n")
    else:
        prices.write_text("x = " + "[" * 100_000 + "\n")
    assert main(["cost", str(run), "--prices", str(prices)]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"dbsurge: prices file {prices} ") and words in lines[0], err


@pytest.mark.parametrize("key, by", [("planned_operations", 5), ("operations", -1), ("not_sent", 2)])
def test_run_json_results_must_agree_with_the_summary(key, by, pristine, tmp_path, capsys):
    """The verdict's figures (run.json) and the ledger table (summary.csv) are one ledger said twice."""
    run = tmp_path / "disagree"
    shutil.copytree(pristine, run)
    results = json.loads((run / "run.json").read_text())["results"]
    meta_set(f"results.{key}", results[key] + by if results[key] + by >= 0 else results[key] + abs(by))(run)
    line = _one_line(capsys, main(["report", str(run)]), f"{run / 'run.json'} is inconsistent")
    assert f"results.{key} is" in line, line
