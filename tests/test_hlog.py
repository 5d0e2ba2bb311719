"""intervals.hlog's lines are written and parsed in one module (`dbsurge.rundir.hlog`); the run directory's
checker and the long run's windows read every line alike.

The checker used to pass an untagged interval line (the format allows one) that the windows then skipped without a
word, so a window's counts could miss intervals of a run the checker called whole; now both refuse it.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from dbsurge.base.errors import UserError
from dbsurge.rundir import hlog
from dbsurge.rundir.reader import check_hlog
from dbsurge.scenarios.windows import HlogWindows, WindowGrid, Windows

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "run_low_rate" / "intervals.hlog"


def _windows() -> HlogWindows:
    return HlogWindows({60.0: Windows(WindowGrid(60.0, 600.0, float("nan")))})


def _verdicts(path: Path) -> tuple[str, str]:
    """(the checker's, the windows') verdict on a log: 'ok' or 'refused'."""
    try:
        check_hlog(path)
        checker = "ok"
    except UserError:
        checker = "refused"
    try:
        _windows().feed(path)
        windows = "ok"
    except UserError:
        windows = "refused"
    return checker, windows


def _first_interval(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("Tag="))


@pytest.mark.parametrize("edit, expected", [
    (lambda line: line, "ok"),
    (lambda line: line.split(",", 1)[1], "refused"),  # untagged: a legal 1.3 line, but of no operation
    (lambda line: "Tag=," + line.split(",", 1)[1], "refused"),  # an empty tag
    (lambda line: line.replace(",1.000,", ",nan,", 1), "refused"),
    (lambda line: line.rsplit(",", 1)[0], "refused"),  # no histogram
])
def test_the_checker_and_the_windows_agree_on_every_line(tmp_path, edit, expected):
    text = FIXTURE.read_text()
    path = tmp_path / "intervals.hlog"
    path.write_text(text + edit(_first_interval(text)) + "\n")
    assert _verdicts(path) == (expected, expected)


def test_what_the_writer_writes_the_parser_reads_back(tmp_path):
    text = FIXTURE.read_text()
    encoded = _first_interval(text).rsplit(",", 1)[1]
    written = hlog.header(1796126663.213) + hlog.interval_line("read", 1.5, 1.0, 2.25, encoded.encode())
    lines = written.splitlines()
    assert [hlog.parse_line(line) for line in lines[:-1]] == [None] * (len(lines) - 1)
    assert hlog.parse_line(lines[-1]) == hlog.Interval("read", 1.5, 1.0, 2.25, encoded)
    assert hlog.base_time(lines[2]) == 1796126663.213
    path = tmp_path / "intervals.hlog"
    shutil.copy(FIXTURE, path)
    windows = _windows()
    assert windows.feed(path) == check_hlog(path) > 0  # every interval the checker counts, the windows read
    assert math.isclose(windows.base_s, 1796126663.213)
